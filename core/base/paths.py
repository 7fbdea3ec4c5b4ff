"""Where kvpilot keeps its files (platform directories, overridable for tests and portable use).

* data: logs of each launch, pidfiles of running servers, measurements, managed runtimes
  (``KVPILOT_DATA_DIR`` or the platform's user data directory)
* cache: learned flag tables, Hub metadata (``KVPILOT_CACHE_DIR`` or the user cache directory)
* config: settings and keyring fallbacks (``KVPILOT_CONFIG_DIR``, see
:mod:`kvpilot.core.app.settings`)
* log: kvpilot's own log, ``kvpilot.log`` (``KVPILOT_LOG_DIR`` or ``<data>/logs``); each
  launch's vLLM log stays in ``<data>/logs``

A folder kvpilot cannot create or write (a read-only file system, a file where the folder should
be, no permission) is told in one sentence that names the folder and the variable that moves it:
:func:`ensure_folder` raises :class:`~kvpilot.core.base.errors.FolderError` with it, and
:func:`folder_error_for` turns an ``OSError`` met inside one of these folders into the same error.

Every state file kvpilot keeps (settings, measurements, pidfiles, runtime manifests, flag-table
and Hub caches, the desktop entry) is written by :func:`atomic_write_text`, and a failed write
is told in one sentence by :func:`write_failure`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from platformdirs import user_cache_dir, user_config_dir, user_data_dir

from kvpilot.core.base.errors import FolderError

APP_NAME = "kvpilot"
DATA_DIR_ENV = "KVPILOT_DATA_DIR"
CACHE_DIR_ENV = "KVPILOT_CACHE_DIR"
CONFIG_DIR_ENV = "KVPILOT_CONFIG_DIR"
LOG_DIR_ENV = "KVPILOT_LOG_DIR"

#: the OS errors that say "this folder cannot be written here" (not a full disk, not a race)
_UNWRITABLE = frozenset({
    errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST,
})


def data_dir() -> Path:
    """The data directory (not created)."""
    override = os.environ.get(DATA_DIR_ENV)
    return Path(override).expanduser() if override else Path(user_data_dir(APP_NAME))


def cache_dir() -> Path:
    """The cache directory (not created)."""
    override = os.environ.get(CACHE_DIR_ENV)
    return Path(override).expanduser() if override else Path(user_cache_dir(APP_NAME))


def config_dir() -> Path:
    """The config directory (not created): settings live there."""
    override = os.environ.get(CONFIG_DIR_ENV)
    return Path(override).expanduser() if override else Path(
        user_config_dir(APP_NAME, appauthor=False)
    )


def log_dir() -> Path:
    """The folder of kvpilot's own log (not created): ``$KVPILOT_LOG_DIR`` or ``<data>/logs``."""
    override = os.environ.get(LOG_DIR_ENV)
    return Path(override).expanduser() if override else data_dir() / "logs"


def measurements_path() -> Path:
    """The JSON file of capacities vLLM reported on this machine."""
    return data_dir() / "measurements.json"


def folders() -> tuple[tuple[str, Path, str], ...]:
    """kvpilot's own folders now: (what, path, the variable that moves it). The log folder is
    listed only when ``KVPILOT_LOG_DIR`` moves it out of the data folder (each launch's vLLM log
    stays in ``<data>/logs``, which the data folder's variable moves)."""
    found = [("data", data_dir(), DATA_DIR_ENV), ("config", config_dir(), CONFIG_DIR_ENV),
             ("cache", cache_dir(), CACHE_DIR_ENV)]
    if os.environ.get(LOG_DIR_ENV):
        found.insert(0, ("log", log_dir(), LOG_DIR_ENV))
    return tuple(found)


def folder_sentence(what: str, path: Path, reason: str, env_var: str) -> str:
    """The one sentence for kvpilot's ``what`` folder at ``path`` that cannot be written."""
    return (
        f"kvpilot's {what} folder {path} cannot be written ({reason}); set {env_var} to a "
        "folder you can write, or make this one writable"
    )


def _reason(exc: OSError) -> str:
    if exc.errno == errno.EEXIST or exc.errno == errno.ENOTDIR:
        return "a file is in the way of the folder"
    return exc.strerror or str(exc)


def ensure_folder(path: Path, *, what: str, env_var: str) -> Path:
    """Create ``path`` (with its parents) when missing and check that it can be written.

    Returns ``path``.

    Raises:
        FolderError: the folder cannot be created or written (a read-only file system, a file
            where the folder should be, no permission); the message names the folder and
            ``env_var``, the variable that moves it.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FolderError(folder_sentence(what, path, _reason(exc), env_var),
                          path=str(path), env_var=env_var) from exc
    if not os.access(path, os.W_OK | os.X_OK):  # access(2) answers EROFS even for root
        try:
            readonly = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError:
            readonly = False
        reason = os.strerror(errno.EROFS if readonly else errno.EACCES)
        raise FolderError(folder_sentence(what, path, reason, env_var),
                          path=str(path), env_var=env_var)
    return path


def folder_problems() -> tuple[FolderError, ...]:
    """kvpilot's data, config and log folders that cannot be created or written now, each as
    its :class:`FolderError` (the folders that can are created when missing). The log folder is
    not told again when it lies inside a data folder already told."""
    found: list[FolderError] = []
    checks = (("data", data_dir(), DATA_DIR_ENV), ("config", config_dir(), CONFIG_DIR_ENV),
              ("log", log_dir(), LOG_DIR_ENV))
    for what, folder, env_var in checks:
        if any(Path(p.path) in folder.parents for p in found):
            continue
        try:
            ensure_folder(folder, what=what, env_var=env_var)
        except FolderError as exc:
            found.append(exc)
    return tuple(found)


def folder_error_for(exc: OSError) -> FolderError | None:
    """The :class:`FolderError` for ``exc`` when it failed in one of kvpilot's own folders
    (by its file name, at the folder, inside it or at a parent still to be created) with an
    errno that means "cannot be written here", else None."""
    if exc.errno not in _UNWRITABLE or not exc.filename:
        return None
    failed = Path(os.fsdecode(exc.filename)).absolute()
    for what, folder, env_var in folders():
        root = folder.absolute()
        if failed == root or root in failed.parents or failed in root.parents:
            reason = _reason(exc)
            if failed != root:
                reason = f"{reason}: {failed}"
            return FolderError(folder_sentence(what, root, reason, env_var),
                               path=str(root), env_var=env_var)
    return None


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
    if exc.errno in _UNWRITABLE - {errno.ENOENT}:
        what = {CONFIG_DIR_ENV: "config", CACHE_DIR_ENV: "cache", LOG_DIR_ENV: "log"}.get(
            env_var, "data")
        return folder_sentence(what, path.parent, _reason(exc), env_var) + (
            " (the previous file is kept)"
        )
    return f"cannot write {path}: {exc.strerror or exc} (the previous file is kept)"
