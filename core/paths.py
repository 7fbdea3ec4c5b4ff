"""Where kvpilot keeps its files (platform directories, overridable for tests and portable use).

* data: logs of each launch, pidfiles of running servers, measurements, managed runtimes
  (``KVPILOT_DATA_DIR`` or the platform's user data directory)
* cache: learned flag tables, Hub metadata (``KVPILOT_CACHE_DIR`` or the user cache directory)

Every state file kvpilot keeps (settings, measurements, pidfiles, runtime manifests, flag-table
and Hub caches, the desktop entry) is written by :func:`atomic_write_text`, and a failed write
is told in one sentence by :func:`write_failure`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically, with permission bits ``mode``.

    The folder is created when missing; the text goes to a temporary file beside ``path``, is
    flushed to the disk (``fsync``) and renamed over ``path``, and the rename is made durable
    where the platform allows it. A reader sees the old file or the new one, never a part; on
    any failure the old file is kept and the temporary file removed.

    Raises:
        OSError: the folder cannot be created or written (a full disk: ENOSPC / EDQUOT; see
            :func:`write_failure` for the sentence to show).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise
    with contextlib.suppress(OSError):  # make the rename durable where the platform allows it
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def mount_point(path: Path) -> Path:
    """The mount point of the file system that holds ``path`` (its nearest existing parent)."""
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
        mount = mount_point(path.parent)
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
