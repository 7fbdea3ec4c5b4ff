"""Failures of the machine around kvpilot rather than of kvpilot, each as one sentence.

An ``OSError`` met in one of kvpilot's own folders (a read-only data folder, a file where the
config folder should be) names the folder and the variable that moves it; a ``/proc`` psutil
cannot read (a container or chroot) names ``/proc`` and how to plan without it. The command
line and the window both word such a failure through :func:`environment_problem`.
"""

from __future__ import annotations

import os
import sys

from kvpilot.core.base.errors import KvpilotError


def environment_problem(exc: BaseException) -> KvpilotError | None:
    """The one-sentence error for a failure of the machine around kvpilot rather than of
    kvpilot: an ``OSError`` in one of kvpilot's own folders (a read-only data folder), or a
    ``/proc`` psutil cannot read (a container or chroot). None for anything else."""
    if "psutil" in sys.modules:
        import psutil

        if isinstance(exc, psutil.AccessDenied):
            from kvpilot.core.hardware.system import proc_unreadable

            return proc_unreadable(exc)
    if not isinstance(exc, OSError):
        return None
    if exc.filename and os.fsdecode(exc.filename).startswith("/proc/"):
        from kvpilot.core.hardware.system import proc_unreadable

        return proc_unreadable(exc)
    from kvpilot.core.base.paths import folder_error_for

    return folder_error_for(exc)
