"""A native crash (a segmentation fault below Python) is written beside kvpilot.log by
faulthandler, and the next start takes the report once (kvpilot.core.app.native_crash)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kvpilot.core.app import native_crash

ARM_AND_CRASH = """
import faulthandler, sys
from pathlib import Path
from kvpilot.core.app import native_crash
native_crash.arm(Path(sys.argv[1]))
faulthandler._sigsegv()
"""

ARM_AND_END = """
import sys
from pathlib import Path
from kvpilot.core.app import native_crash
native_crash.arm(Path(sys.argv[1]))
"""


def _run(script: str, log_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, str(log_dir)], capture_output=True,
                          text=True, timeout=60)


def test_a_segfault_is_written_beside_the_log_and_taken_once(tmp_path: Path) -> None:
    done = _run(ARM_AND_CRASH, tmp_path)
    assert done.returncode == -signal.SIGSEGV
    written = native_crash.crash_file(tmp_path).read_text(encoding="utf-8")
    assert "Fatal Python error: Segmentation fault" in written
    assert "<string>" in written  # the crashing thread's Python stack

    report = native_crash.take_previous(tmp_path)
    assert report is not None
    assert report.headline == "Fatal Python error: Segmentation fault"
    assert report.text == written
    assert report.path.parent == tmp_path and report.path.name.startswith("kvpilot-crash-")
    assert report.path.read_text(encoding="utf-8") == written
    assert native_crash.take_previous(tmp_path) is None  # offered once


def test_a_run_that_ends_normally_leaves_no_report(tmp_path: Path) -> None:
    done = _run(ARM_AND_END, tmp_path)
    assert done.returncode == 0, done.stderr
    assert native_crash.crash_file(tmp_path).read_text(encoding="utf-8") == ""
    assert native_crash.take_previous(tmp_path) is None


def test_an_unreadable_log_folder_is_no_report(tmp_path: Path) -> None:
    assert native_crash.take_previous(tmp_path / "missing") is None
