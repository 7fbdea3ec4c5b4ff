"""The log file of one launch: vLLM's output as it came, rotated by size, old launches pruned.

A write that fails (a full disk) is reported once on kvpilot's log, not per line; the
supervisor keeps the latest lines in memory either way.
"""

from __future__ import annotations

import contextlib
import logging
import logging.handlers
import sys
from pathlib import Path

from kvpilot.core.base.paths import DATA_DIR_ENV, ensure_folder

log = logging.getLogger("kvpilot.core.vllm.supervisor")


class _LaunchLogHandler(logging.handlers.RotatingFileHandler):
    """A rotating file handler that reports a failed write (a full disk) once, not per line."""

    failure: str | None = None

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: ARG002 - logging override
        if self.failure is None:
            exc = sys.exc_info()[1]
            self.failure = str(exc) if exc is not None else "unknown error"
            log.warning(
                "the launch log %s cannot be written (%s); vLLM's latest lines are still kept "
                "in memory; free some disk space",
                self.baseFilename,
                self.failure,
            )


class LaunchLog:
    """A rotating log file for one launch, plus pruning of old launches' files."""

    def __init__(
        self, folder: Path, stem: str, *, max_bytes: int, backups: int, keep_launches: int
    ) -> None:
        """Open ``<folder>/<stem>.log`` (``folder`` created when missing).

        Raises:
            FolderError: ``folder`` cannot be created or written (a read-only data folder):
                the message names it and ``KVPILOT_DATA_DIR``.
        """
        ensure_folder(folder, what="launch log", env_var=DATA_DIR_ENV)
        self.path = folder / f"{stem}.log"
        self._logger = logging.Logger(f"kvpilot.launch.{stem}")
        self._logger.propagate = False
        handler = _LaunchLogHandler(
            self.path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler = handler
        self._logger.addHandler(handler)
        self._prune(folder, keep_launches)

    def _prune(self, folder: Path, keep: int) -> None:
        launches = sorted(p for p in folder.glob("*.log") if p != self.path)
        for old in launches[: max(0, len(launches) - (keep - 1))]:
            for f in folder.glob(old.name + "*"):
                with contextlib.suppress(OSError):
                    f.unlink()

    def write(self, line: str) -> None:
        self._logger.info(line)

    def close(self) -> None:
        """Close the file; a last flush that fails (the disk is still full) is not an error."""
        with contextlib.suppress(OSError, ValueError):
            self._handler.close()
        self._logger.removeHandler(self._handler)
