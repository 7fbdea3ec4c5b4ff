"""One launch's log file: written as it comes, old launches pruned, a full disk said once."""

from __future__ import annotations

import errno
import io
import logging
from pathlib import Path

import pytest

from kvpilot.core.vllm.launch_log import LaunchLog


def test_lines_are_written_and_old_launches_pruned(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    for stem in ("20261201-1", "20261201-2", "20261201-3"):
        old = LaunchLog(folder, stem, max_bytes=1 << 20, backups=1, keep_launches=10)
        old.write(f"line of {stem}")
        old.close()
    log = LaunchLog(folder, "20261202-1", max_bytes=1 << 20, backups=1, keep_launches=2)
    log.write("# vllm serve m")
    log.write("INFO ready")
    log.close()
    assert sorted(p.name for p in folder.iterdir()) == ["20261201-3.log", "20261202-1.log"]
    assert log.path.read_text() == "# vllm serve m\nINFO ready\n"


def test_a_write_that_fails_is_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class FullDisk(io.StringIO):
        def write(self, _text: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    log = LaunchLog(tmp_path, "x", max_bytes=1 << 20, backups=1, keep_launches=5)
    log._handler.stream.close()
    log._handler.stream = FullDisk()  # every later write fails, as on a full disk
    with caplog.at_level(logging.WARNING):
        for n in range(5):
            log.write(f"line {n}")
    assert caplog.text.count("cannot be written") == 1
    assert "No space left on device" in caplog.text and "free some disk space" in caplog.text
    log.close()  # the last flush fails too: closing still succeeds
