"""kvpilot's own folders cannot be written, or ``/proc`` cannot be read: one sentence that names
the folder and the fix (the variable that moves it), on the command line (non-zero, no
traceback) and in the window, never a traceback.

A read-only folder is a real read-only bind mount where the tests may mount one (root), a
folder without write permission for another user; a file where a folder should be works for
everyone. An unreadable ``/proc`` is psutil's own ``PROCFS_PATH`` pointed at an empty folder
(psutil then fails exactly as in a container without ``/proc``), or psutil's ``AccessDenied``
from its memory reader.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from e2e.servekit import kvpilot_argv

from kvpilot.core import cli
from kvpilot.core.base import paths
from kvpilot.core.base.errors import FolderError, ProcUnreadableError
from kvpilot.core.hardware import system
from kvpilot.core.vllm.launch_log import LaunchLog

TESTS = Path(__file__).resolve().parents[1]
FAKE = TESTS / "fakes" / "fake_vllm.py"
MODEL = TESTS / "data" / "models" / "qwen3-8b"


@pytest.fixture
def readonly(tmp_path: Path) -> Iterator[Path]:
    """A folder that cannot be written: a read-only bind mount (root), else mode 0555."""
    src, ro = tmp_path / "ro-src", tmp_path / "ro"
    src.mkdir()
    ro.mkdir()
    mounted = False
    if os.geteuid() == 0:
        bind = subprocess.run(["mount", "--bind", str(src), str(ro)], capture_output=True,
                              check=False)
        if bind.returncode == 0:
            mounted = subprocess.run(
                ["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True, check=False
            ).returncode == 0
            if not mounted:
                subprocess.run(["umount", "-l", str(ro)], check=False)
        if not mounted:
            pytest.skip("root here cannot mount a read-only bind; the file-in-the-way tests "
                        "cover the same sentence")
    else:
        ro.chmod(0o555)
    try:
        yield ro
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(ro)], check=False)
        else:
            ro.chmod(0o755)


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A file where kvpilot expects a folder."""
    f = tmp_path / "not-a-folder"
    f.write_text("a file, not a folder\n")
    return f


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVPILOT_")}
    env.update(
        KVPILOT_CACHE_DIR=str(tmp_path / "cache"),
        KVPILOT_CONFIG_DIR=str(tmp_path / "config"),
        KVPILOT_VLLM=str(exe),
        KVPILOT_FAKE_NVML="no-driver",
        HF_HUB_OFFLINE="1",
        FAKE_VLLM_CHILD="1",
        FAKE_VLLM_VERSION="0.32.0+cpu",
    )
    env.update(extra)
    return env


def _serve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        kvpilot_argv("serve", "--model", str(MODEL), "--port", "19879",
                     "--kv-cache-memory-bytes", "1G"),
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("kvpilot: error:")]
    assert len(errors) == 1, err
    return errors[0]


# ----------------------------------------------------------------------------- the sentence


def test_a_read_only_folder_is_named_with_the_variable_that_moves_it(readonly: Path) -> None:
    with pytest.raises(FolderError) as caught:
        paths.ensure_folder(readonly / "kvpilot", what="data", env_var=paths.DATA_DIR_ENV)
    msg = caught.value.message
    assert f"kvpilot's data folder {readonly / 'kvpilot'} cannot be written" in msg
    assert "set KVPILOT_DATA_DIR to a folder you can write" in msg
    # an existing folder on a read-only file system: mkdir passes, the write check does not
    with pytest.raises(FolderError, match="KVPILOT_DATA_DIR"):
        paths.ensure_folder(readonly, what="data", env_var=paths.DATA_DIR_ENV)


def test_a_file_where_the_folder_should_be_is_said_so(blocked: Path) -> None:
    with pytest.raises(FolderError) as caught:
        paths.ensure_folder(blocked / "kvpilot", what="config", env_var=paths.CONFIG_DIR_ENV)
    assert caught.value.message == (
        f"kvpilot's config folder {blocked / 'kvpilot'} cannot be written (a file is in the way "
        "of the folder); set KVPILOT_CONFIG_DIR to a folder you can write, or make this one "
        "writable"
    )
    assert caught.value.path == str(blocked / "kvpilot")


def test_every_folder_kvpilot_keeps_is_checked_and_told_once(
    blocked: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(blocked / "data"))
    monkeypatch.setenv(paths.CONFIG_DIR_ENV, str(blocked / "config"))
    monkeypatch.delenv(paths.LOG_DIR_ENV, raising=False)
    told = paths.folder_problems()
    # the log folder lies in the data folder: told once, with the data folder
    assert [p.env_var for p in told] == [paths.DATA_DIR_ENV, paths.CONFIG_DIR_ENV]
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.setenv(paths.LOG_DIR_ENV, str(blocked / "logs"))
    (log,) = paths.folder_problems()
    assert log.env_var == "KVPILOT_LOG_DIR" and "kvpilot's log folder" in log.message
    assert (tmp_path / "data").is_dir() and (tmp_path / "config").is_dir()


def test_an_os_error_inside_a_kvpilot_folder_becomes_the_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(paths.DATA_DIR_ENV, str(tmp_path / "data"))
    inside = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "data" / "runs"))
    folder = paths.folder_error_for(inside)
    assert folder is not None and folder.env_var == "KVPILOT_DATA_DIR"
    assert folder.message.startswith(f"kvpilot's data folder {tmp_path / 'data'} cannot be "
                                     "written (Read-only file system: ")
    elsewhere = OSError(errno.EROFS, "Read-only file system", "/somewhere/else")
    assert paths.folder_error_for(elsewhere) is None
    missing = OSError(errno.ENOENT, "No such file", str(tmp_path / "data" / "x.json"))
    assert paths.folder_error_for(missing) is None  # not there yet is no folder problem


def test_a_settings_write_to_a_read_only_config_folder_names_the_variable(
    readonly: Path,
) -> None:
    text = paths.write_failure(readonly / "settings.json",
                               OSError(errno.EROFS, "Read-only file system"), 100,
                               env_var=paths.CONFIG_DIR_ENV)
    assert text.startswith(f"kvpilot's config folder {readonly} cannot be written")
    assert "set KVPILOT_CONFIG_DIR" in text and text.endswith("(the previous file is kept)")


def test_a_launch_log_folder_that_cannot_be_made_names_the_data_variable(blocked: Path) -> None:
    with pytest.raises(FolderError, match=r"launch log folder .*KVPILOT_DATA_DIR"):
        LaunchLog(blocked / "logs", "x", max_bytes=1000, backups=1, keep_launches=2)


def test_kvpilots_own_log_in_a_read_only_folder_says_where_and_goes_to_stderr(
    readonly: Path,
) -> None:
    code = (
        "from kvpilot.core.app import logsetup\n"
        "print(logsetup.configure())\n"
    )
    env = {"KVPILOT_LOG_DIR": str(readonly / "logs"), "PATH": "/usr/bin:/bin",
           "KVPILOT_DATA_DIR": str(readonly.parent / "data")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    assert proc.stdout.strip() == "None"
    assert f"kvpilot's log folder {readonly / 'logs'} cannot be written" in proc.stderr
    assert "KVPILOT_LOG_DIR" in proc.stderr and "logging to stderr only" in proc.stderr
    assert not (readonly / "logs").exists()


# ----------------------------------------------------------------------------- the CLI


def test_serve_with_a_read_only_xdg_data_home_is_one_line_and_exit_2(
    readonly: Path, tmp_path: Path
) -> None:
    proc = _serve(_env(tmp_path, XDG_DATA_HOME=str(readonly)))
    line = _one_error_line(proc.stderr)
    assert proc.returncode == 2, proc.stderr
    assert f"kvpilot's data folder {readonly / 'kvpilot'} cannot be written" in line
    assert "set KVPILOT_DATA_DIR" in line


def test_serve_with_a_data_folder_in_the_way_is_one_line_and_exit_2(
    blocked: Path, tmp_path: Path
) -> None:
    proc = _serve(_env(tmp_path, KVPILOT_DATA_DIR=str(blocked / "data")))
    line = _one_error_line(proc.stderr)
    assert proc.returncode == 2
    assert f"kvpilot's data folder {blocked / 'data'}" in line and "KVPILOT_DATA_DIR" in line


def test_serve_with_its_launch_log_folder_in_the_way_starts_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "logs").write_text("a file where the launch logs go\n")
    proc = _serve(_env(tmp_path, KVPILOT_DATA_DIR=str(data),
                       KVPILOT_LOG_DIR=str(tmp_path / "own-log")))
    line = _one_error_line(proc.stderr)
    assert proc.returncode != 0
    assert f"kvpilot's launch log folder {data / 'logs'}" in line and "KVPILOT_DATA_DIR" in line


def _plan_with_procfs(procfs: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys, psutil\n"
        f"psutil.PROCFS_PATH = {str(procfs)!r}\n"
        "from kvpilot.core.cli import main\n"
        f"sys.exit(main(['plan', '--model', {str(MODEL)!r}, '--max-model-len', '8192',"
        " '--gpu-memory-utilization', '0.85']))\n"
    )
    env = _env(tmp_path, KVPILOT_DATA_DIR=str(tmp_path / "data"),
               KVPILOT_FAKE_NVML="rtx4090-desktop")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


def test_plan_without_a_readable_proc_is_one_line_naming_proc_and_the_fix(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "proc"
    empty.mkdir()
    proc = _plan_with_procfs(empty, tmp_path)
    line = _one_error_line(proc.stderr)
    assert proc.returncode == 2
    assert f"{empty / 'meminfo'} (No such file or directory)" in line
    assert "not mounted or not readable" in line and "mount -t proc proc /proc" in line
    assert "--gpu" in line
    # the same machine with /proc readable plans
    ok = _plan_with_procfs(Path("/proc"), tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "verdict" in ok.stdout


def test_plan_when_psutil_is_denied_proc_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied() -> object:
        raise psutil.AccessDenied(msg="/proc/meminfo")

    monkeypatch.setattr(psutil, "virtual_memory", denied)
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    status = cli.main(["plan", "--model", str(MODEL), "--max-model-len", "8192"])
    err = capsys.readouterr().err
    assert status == 2
    line = _one_error_line(err)
    assert "/proc (access denied)" in line and "mount -t proc proc /proc" in line
    with pytest.raises(ProcUnreadableError):
        system.read_system()


def test_a_stray_os_error_from_proc_is_worded_by_the_cli_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Any command, any reader: an OSError naming a /proc file ends in the same sentence."""
    from kvpilot.core.commands import runs

    def unreadable(_args: object) -> int:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "/proc/1/stat")

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(runs, "run", unreadable)
    assert cli.main(["runs"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "/proc/1/stat (No such file or directory)" in line
