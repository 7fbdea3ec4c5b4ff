"""Logging, set up once per process: kvpilot's own messages go to a rotating file in the log
folder (``<data_dir>/logs/kvpilot.log``, or ``$KVPILOT_LOG_DIR``; 5 MiB x 3), warnings also to
stderr.

vLLM's output is not here: each launch has its own log (see :mod:`kvpilot.core.vllm.supervisor`).
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading
from pathlib import Path

#: the logger every kvpilot module's logger descends from
ROOT_LOGGER = "kvpilot"
FILE_NAME = "kvpilot.log"
MAX_BYTES = 5 << 20
BACKUPS = 3

_lock = threading.Lock()
_configured: Path | None = None
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(log_dir: Path | None = None, *, stderr_level: int = logging.WARNING) -> Path | None:
    """Attach the file and stderr handlers to the ``kvpilot`` logger, once per process.

    ``log_dir`` defaults to :func:`kvpilot.core.base.paths.log_dir`. Returns the log file's path, or
    None when that folder cannot be written (then only stderr is used; the reason, with the
    folder and ``KVPILOT_LOG_DIR``, is logged there). A second call returns the first call's
    path and changes nothing.
    """
    global _configured
    with _lock:
        root = logging.getLogger(ROOT_LOGGER)
        if getattr(root, "_kvpilot_configured", False):
            return _configured
        root.setLevel(logging.INFO)
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setLevel(stderr_level)
        stderr.setFormatter(logging.Formatter("kvpilot: %(levelname)s: %(message)s"))
        root.addHandler(stderr)
        path: Path | None = None
        from kvpilot.core.base import paths
        from kvpilot.core.base.errors import FolderError

        if log_dir is None:
            log_dir = paths.log_dir()
        try:
            paths.ensure_folder(log_dir, what="log", env_var=paths.LOG_DIR_ENV)
            path = log_dir / FILE_NAME
            handler = logging.handlers.RotatingFileHandler(
                path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8", delay=True
            )
            handler.setFormatter(logging.Formatter(_FORMAT))
            root.addHandler(handler)
        except FolderError as exc:
            root.warning("%s; logging to stderr only", exc.message)
            path = None
        except OSError as exc:
            root.warning("%s; logging to stderr only", paths.folder_sentence(
                "log", log_dir, exc.strerror or str(exc), paths.LOG_DIR_ENV))
            path = None
        root._kvpilot_configured = True  # type: ignore[attr-defined]
        _configured = path
        return path


def log_path() -> Path | None:
    """The log file :func:`configure` set up (None before, or when it could not be written)."""
    return _configured
