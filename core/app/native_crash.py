"""A crash below Python (a segmentation fault in Qt, an abort) written where the next start
finds it: :func:`arm` points :mod:`faulthandler` at ``kvpilot-crash.txt`` beside ``kvpilot.log``;
:func:`take_previous` reads what the last run left there.

A run that ends normally leaves the file empty. A run that crashes leaves faulthandler's report
in it (the signal and every thread's Python stack); the next start moves it aside to
``kvpilot-crash-<UTC time>.txt`` (so it is offered once) and the window offers it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: the file faulthandler writes into, beside kvpilot.log
FILE_NAME = "kvpilot-crash.txt"
#: how much of a report is read back (characters; faulthandler's own reports are a few KiB)
MAX_REPORT_CHARS = 64 << 10

_armed: IO[str] | None = None


@dataclass(frozen=True)
class NativeCrash:
    """The report of a run that crashed: ``text`` as faulthandler wrote it, kept at ``path``."""

    text: str
    path: Path

    @property
    def headline(self) -> str:
        """Its first "Fatal Python error" line (or its first line)."""
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip()]
        for ln in lines:
            if ln.startswith("Fatal Python error"):
                return ln
        return lines[0] if lines else "an unknown crash"


def crash_file(log_dir: Path) -> Path:
    """Where :func:`arm` makes faulthandler write in ``log_dir``."""
    return log_dir / FILE_NAME


def take_previous(log_dir: Path) -> NativeCrash | None:
    """The crash report the last run left in ``log_dir``, moved aside so that it is offered
    once; None when that run ended without one (or the folder cannot be read)."""
    path = crash_file(log_dir)
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            text = f.read(MAX_REPORT_CHARS)
    except OSError:
        return None
    if not text.strip():
        return None
    kept = log_dir / f"kvpilot-crash-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.txt"
    try:
        path.replace(kept)
    except OSError:
        kept = path
    return NativeCrash(text=text, path=kept)


def arm(log_dir: Path | None) -> Path | None:
    """Make faulthandler write a native crash to ``log_dir``'s crash file (emptied now; call
    :func:`take_previous` first). Returns that file, or None when it cannot be written (then
    faulthandler writes to stderr)."""
    global _armed
    if log_dir is not None:
        try:
            f = crash_file(log_dir).open("w", encoding="utf-8")
        except OSError:
            pass
        else:
            if _armed is not None:
                _armed.close()
            _armed = f
            faulthandler.enable(file=f, all_threads=True)
            return crash_file(log_dir)
    with contextlib.suppress(AttributeError, ValueError, OSError):  # no usable stderr
        faulthandler.enable(file=sys.stderr, all_threads=True)
    return None
