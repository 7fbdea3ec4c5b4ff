"""Managed vLLM runtimes on disk: what is installed, which one is the default, removal.

Layout under kvpilot's data directory (:func:`kvpilot.core.base.paths.data_dir`, moved by
``KVPILOT_DATA_DIR``)::

    runtimes/
      0.32.0-cpu/                 a virtual environment with vLLM in it
        kvpilot-runtime.json      written last, only after the install was verified
        .kvpilot-installing       present while an install runs (holds the installer's pid)
      default                     the id of the default runtime (one line)
      logs/install-<id>-<time>.log  the full log of every install, kept

A folder without ``kvpilot-runtime.json`` is not a verified runtime (half-made or placed there by
hand); discovery still tries folders placed by hand, but never one that is being installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from kvpilot.core.base import paths
from kvpilot.core.base.errors import RuntimeInstallError

MANIFEST = "kvpilot-runtime.json"
INSTALLING_MARKER = ".kvpilot-installing"
DEFAULT_FILE = "default"
LOGS_DIR = "logs"
ID_RE = re.compile(r"^(?P<version>\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)-(?P<variant>cuda|cpu)$")


def runtimes_root(data_dir: Path | None = None) -> Path:
    """``<data_dir>/runtimes`` (not created)."""
    return (data_dir if data_dir is not None else paths.data_dir()) / "runtimes"


def logs_dir(data_dir: Path | None = None) -> Path:
    """Where install logs are kept (not created)."""
    return runtimes_root(data_dir) / LOGS_DIR


def parse_runtime_id(text: str) -> tuple[str, str] | None:
    """``"0.32.0-cpu"`` -> ``("0.32.0", "cpu")``; None when it is not a runtime id."""
    match = ID_RE.match(text.strip())
    return (match.group("version"), match.group("variant")) if match else None


@dataclass(frozen=True)
class InstalledRuntime:
    """One folder under ``runtimes/``.

    Attributes:
        runtime_id: the folder name (``"0.32.0-cpu"``).
        path: the environment folder.
        version, variant: from the manifest (or the folder name when there is none).
        vllm_version: what ``vllm --version`` printed at verification ("" if never verified).
        verified: the install finished and was verified (manifest present).
        problem: why it cannot be used now (None = usable), one sentence with the fix.
        is_default: it is the default runtime.
        size_bytes: size of the environment when it was installed (0 if unknown).
        installed_at: ISO time of the install ("" if unknown).
        installer: ``uv`` or ``pip`` ("" if unknown).
        flags_count: number of ``vllm serve`` flags learned at verification.
        log_path: the install log ("" if unknown).
    """

    runtime_id: str
    path: Path
    version: str
    variant: str
    vllm_version: str = ""
    verified: bool = False
    problem: str | None = None
    is_default: bool = False
    size_bytes: int = 0
    installed_at: str = ""
    installer: str = ""
    flags_count: int = 0
    log_path: str = ""

    @property
    def usable(self) -> bool:
        """Verified and nothing wrong with it now."""
        return self.verified and self.problem is None

    @property
    def vllm_executable(self) -> Path:
        """``<path>/bin/vllm``."""
        return self.path / "bin" / "vllm"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (paths as strings)."""
        return {
            "id": self.runtime_id,
            "version": self.version,
            "variant": self.variant,
            "vllm_version": self.vllm_version,
            "path": str(self.path),
            "verified": self.verified,
            "usable": self.usable,
            "problem": self.problem,
            "default": self.is_default,
            "size_bytes": self.size_bytes,
            "installed_at": self.installed_at,
            "installer": self.installer,
            "flags_count": self.flags_count,
            "log_path": self.log_path,
        }


def _read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_manifest(folder: Path, data: dict[str, Any]) -> None:
    """Write the manifest atomically (the last step of a verified install).

    Raises:
        OSError: the folder cannot be written.
    """
    paths.atomic_write_text(folder / MANIFEST, json.dumps(data, indent=1, sort_keys=True) + "\n")


def installing_pid(folder: Path) -> int | None:
    """The pid recorded by a running (or crashed) install in ``folder``, None when none."""
    try:
        text = (folder / INSTALLING_MARKER).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return 0


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def install_in_progress(folder: Path) -> bool:
    """True when an install whose process is still alive is writing ``folder``."""
    pid = installing_pid(folder)
    return pid is not None and _pid_alive(pid)


def _health_problem(folder: Path) -> str | None:
    python = folder / "bin" / "python"
    if not python.exists():  # exists() follows the link: a dangling interpreter link fails
        return (
            f"its Python interpreter {python} is missing or points nowhere (the Python it was "
            "made with was removed or upgraded); remove it and install it again"
        )
    if not (folder / "bin" / "vllm").exists():
        return f"{folder / 'bin' / 'vllm'} is missing; remove it and install it again"
    return None


def _describe(folder: Path, default_id: str | None) -> InstalledRuntime | None:
    name = folder.name
    parsed = parse_runtime_id(name)
    manifest = _read_manifest(folder)
    if manifest is None and parsed is None and not (folder / "bin" / "vllm").exists():
        return None  # not ours and not a vLLM environment
    version, variant = parsed if parsed else ("", "")
    if manifest is not None:
        version = str(manifest.get("version", version))
        variant = str(manifest.get("variant", variant))
    problem: str | None
    if install_in_progress(folder):
        problem = "an install is still running into this folder"
    elif installing_pid(folder) is not None:
        problem = "its install was interrupted; remove it and install it again"
    elif manifest is None:
        problem = _health_problem(folder) or (
            "it was not installed and verified by kvpilot (no kvpilot-runtime.json)"
        )
    else:
        problem = _health_problem(folder)
    return InstalledRuntime(
        runtime_id=name,
        path=folder,
        version=version,
        variant=variant,
        vllm_version=str((manifest or {}).get("vllm_version", "")),
        verified=manifest is not None,
        problem=problem,
        is_default=name == default_id,
        size_bytes=int((manifest or {}).get("size_bytes", 0) or 0),
        installed_at=str((manifest or {}).get("installed_at", "")),
        installer=str((manifest or {}).get("installer", "")),
        flags_count=int((manifest or {}).get("flags_count", 0) or 0),
        log_path=str((manifest or {}).get("log_path", "")),
    )


def _version_key(rt: InstalledRuntime) -> tuple[Version, str]:
    try:
        return Version(rt.version), rt.variant
    except InvalidVersion:
        return Version("0"), rt.variant


def list_installed(data_dir: Path | None = None) -> list[InstalledRuntime]:
    """Every runtime folder: the default first, then newest version first."""
    root = runtimes_root(data_dir)
    if not root.is_dir():
        return []
    default = read_default(data_dir)
    found = [
        rt
        for folder in root.iterdir()
        if folder.is_dir() and folder.name != LOGS_DIR and not folder.name.startswith(".")
        for rt in [_describe(folder, default)]
        if rt is not None
    ]
    found.sort(key=_version_key, reverse=True)
    found.sort(key=lambda rt: not rt.is_default)
    return found


def get_installed(runtime_id: str, data_dir: Path | None = None) -> InstalledRuntime | None:
    """The runtime called ``runtime_id`` (a folder name), or None."""
    folder = runtimes_root(data_dir) / runtime_id
    if not folder.is_dir():
        return None
    return _describe(folder, read_default(data_dir))


def resolve_id(text: str, data_dir: Path | None = None) -> InstalledRuntime:
    """The installed runtime a user means by ``text``: an id (``0.32.0-cpu``) or a version
    (``0.32.0``) when exactly one variant of it is installed.

    Raises:
        RuntimeInstallError: nothing or several runtimes match (the message lists them).
    """
    installed = list_installed(data_dir)
    exact = [rt for rt in installed if rt.runtime_id == text.strip()]
    if exact:
        return exact[0]
    by_version = [rt for rt in installed if rt.version == text.strip()]
    if len(by_version) == 1:
        return by_version[0]
    names = ", ".join(rt.runtime_id for rt in installed) or "none"
    if by_version:
        ids = ", ".join(r.runtime_id for r in by_version)
        raise RuntimeInstallError(f"several runtimes have version {text} ({ids}); name one")
    raise RuntimeInstallError(
        f"no managed runtime '{text}' (installed: {names}); see kvpilot runtime list"
    )


def read_default(data_dir: Path | None = None) -> str | None:
    """The id in ``runtimes/default``, None when unset."""
    try:
        text = (runtimes_root(data_dir) / DEFAULT_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None


def set_default(runtime_id: str, data_dir: Path | None = None) -> InstalledRuntime:
    """Make ``runtime_id`` the default (it must be verified and healthy).

    Raises:
        RuntimeInstallError: no such runtime, or it is not usable (the message says why).
    """
    rt = resolve_id(runtime_id, data_dir)
    if not rt.usable:
        raise RuntimeInstallError(
            f"runtime {rt.runtime_id} cannot be the default: {rt.problem}"
        )
    root = runtimes_root(data_dir)
    try:
        paths.atomic_write_text(root / DEFAULT_FILE, rt.runtime_id + "\n")
    except OSError as exc:
        raise RuntimeInstallError(
            f"cannot write {root / DEFAULT_FILE}: {exc.strerror or exc}; check its permissions"
        ) from exc
    result = get_installed(rt.runtime_id, data_dir)
    assert result is not None
    return result


def clear_default(data_dir: Path | None = None) -> None:
    """Forget the default runtime (nothing happens when none is set)."""
    with contextlib.suppress(OSError):
        (runtimes_root(data_dir) / DEFAULT_FILE).unlink()


def _inside(value: str, folder: Path) -> bool:
    try:
        path = Path(value).expanduser().resolve()
        base = folder.resolve()
    except (OSError, RuntimeError):
        return False
    return path == base or base in path.parents


def profile_uses(vllm_runtime_setting: str, rt: InstalledRuntime) -> bool:
    """True when a profile's ``vllm_runtime`` value pins ``rt`` (its id, folder or a file in it)."""
    value = vllm_runtime_setting.strip()
    if not value:
        return False
    if value == rt.runtime_id:
        return True
    return _inside(value, rt.path)


def profiles_using(profiles: Iterable[Any], rt: InstalledRuntime) -> list[str]:
    """Names of the profiles (objects with ``name`` and ``vllm_runtime``) that pin ``rt``."""
    return [
        str(p.name) for p in profiles if profile_uses(str(getattr(p, "vllm_runtime", "")), rt)
    ]


def remove_runtime(
    runtime_id: str,
    *,
    data_dir: Path | None = None,
    used_by: Iterable[str] = (),
    force: bool = False,
) -> InstalledRuntime:
    """Delete a managed runtime folder.

    ``used_by`` are the profiles that pin it (see :func:`profiles_using`); removing one that is
    used needs ``force``. When it was the default, the default is cleared (the next discovery
    falls back to the other runtimes).

    Raises:
        RuntimeInstallError: unknown id, an install still running into it, used by profiles
            without ``force``, or the folder cannot be deleted.
    """
    rt = resolve_id(runtime_id, data_dir)
    if install_in_progress(rt.path):
        raise RuntimeInstallError(
            f"an install is still running into {rt.path}; cancel it first"
        )
    users = list(used_by)
    if users and not force:
        raise RuntimeInstallError(
            f"runtime {rt.runtime_id} is pinned by profile(s) {', '.join(users)}; pick another "
            "runtime in those profiles first, or pass --force to remove it anyway"
        )
    try:
        shutil.rmtree(rt.path)
    except OSError as exc:
        raise RuntimeInstallError(
            f"cannot delete {rt.path}: {exc.strerror or exc}; check its permissions"
        ) from exc
    if rt.is_default:
        clear_default(data_dir)
    return rt


def managed_executables(data_dir: Path | None = None) -> list[Path]:
    """``bin/vllm`` of the runtimes discovery should try, in order: the default, the other
    verified ones (newest first), then folders placed by hand; never a folder being installed,
    an interrupted install or a broken one."""
    out: list[Path] = []
    hand_placed: list[Path] = []
    for rt in list_installed(data_dir):
        if rt.usable:
            out.append(rt.vllm_executable)
        elif (
            not rt.verified
            and installing_pid(rt.path) is None
            and rt.vllm_executable.exists()
        ):
            hand_placed.append(rt.vllm_executable)
    return out + hand_placed
