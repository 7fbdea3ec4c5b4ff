"""Where kvpilot keeps its files (platform directories, overridable for tests and portable use).

* data: logs of each launch, pidfiles of running servers, measurements, managed runtimes
  (``KVPILOT_DATA_DIR`` or the platform's user data directory)
* cache: learned flag tables, Hub metadata (``KVPILOT_CACHE_DIR`` or the user cache directory)
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_cache_dir, user_data_dir

APP_NAME = "kvpilot"


def data_dir() -> Path:
    """The data directory (not created)."""
    override = os.environ.get("KVPILOT_DATA_DIR")
    return Path(override).expanduser() if override else Path(user_data_dir(APP_NAME))


def cache_dir() -> Path:
    """The cache directory (not created)."""
    override = os.environ.get("KVPILOT_CACHE_DIR")
    return Path(override).expanduser() if override else Path(user_cache_dir(APP_NAME))


def measurements_path() -> Path:
    """The JSON file of capacities vLLM reported on this machine."""
    return data_dir() / "measurements.json"


def _mount_point(path: Path) -> Path:
    p = path.resolve()
    while not p.exists():
        p = p.parent
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def write_failure(path: Path, exc: OSError, needed_bytes: int, *, env_var: str) -> str:
    """One sentence for a failed write of ``path`` (``needed_bytes`` long): on a full disk it
    names the disk (its mount point), the bytes needed and free, and the fix; otherwise the OS
    reason. ``env_var`` is the variable that moves the folder elsewhere."""
    import errno
    import shutil

    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        mount = _mount_point(path.parent)
        try:
            free = f"{shutil.disk_usage(mount).free:,} bytes are free"
        except OSError:
            free = "its free space is unknown"
        return (
            f"the disk holding {path.parent} (mounted at {mount}) is full "
            f"({exc.strerror or 'no space left'}): writing {path.name} "
            f"needs {needed_bytes:,} bytes and {free}; free some space there or set {env_var} "
            "to a folder on another disk (the previous file is kept)"
        )
    return f"cannot write {path}: {exc.strerror or exc} (the previous file is kept)"
