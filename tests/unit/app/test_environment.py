"""environment_problem: which failures of the machine around kvpilot become one sentence."""

from __future__ import annotations

import errno
from pathlib import Path

import psutil
import pytest

from kvpilot.core.app.environment import environment_problem
from kvpilot.core.base import paths
from kvpilot.core.base.errors import FolderError, ProcUnreadableError


def test_a_read_only_data_folder_names_the_folder_and_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(data))
    err = OSError(errno.EROFS, "Read-only file system", str(data / "logs" / "x.log"))
    problem = environment_problem(err)
    assert isinstance(problem, FolderError)
    assert str(data) in problem.message and paths.DATA_DIR_ENV in problem.message


def test_an_unreadable_proc_file_names_proc(tmp_path: Path) -> None:
    err = FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/meminfo")
    problem = environment_problem(err)
    assert isinstance(problem, ProcUnreadableError)
    assert "/proc" in problem.message


def test_psutil_access_denied_names_proc() -> None:
    problem = environment_problem(psutil.AccessDenied(pid=1))
    assert isinstance(problem, ProcUnreadableError)


def test_anything_else_is_left_to_its_own_handler(tmp_path: Path) -> None:
    assert environment_problem(ValueError("not the machine's fault")) is None
    # an OSError outside every kvpilot folder is not kvpilot's folder problem
    outside = OSError(errno.EACCES, "Permission denied", "/somewhere/else/file")
    assert environment_problem(outside) is None
