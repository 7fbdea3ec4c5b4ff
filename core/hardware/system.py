"""The host around the GPU: CPU, RAM, swap, disk space for models, OS and WSL2.

Read with psutil and a few files under /proc; every reader takes its inputs as parameters so
tests can point it at recorded text.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from kvpilot.core.base.errors import ProcUnreadableError
from kvpilot.core.hub.cache import hub_cache_dir


@dataclass(frozen=True)
class SystemSnapshot:
    """The machine at one moment. Sizes in bytes; None where it could not be read.

    ``is_wsl2`` is True under Windows Subsystem for Linux (the NVIDIA driver then reports no
    per-process GPU memory). ``hf_cache_free_bytes`` and ``model_dir_free_bytes`` are the free
    space on the file systems that hold the Hugging Face cache and the chosen model directory
    (measured at the nearest existing parent when the directory does not exist yet).
    """

    os_name: str
    os_release: str
    os_pretty_name: str | None
    is_wsl2: bool
    cpu_model: str | None
    cpu_cores_physical: int | None
    cpu_cores_logical: int | None
    ram_total_bytes: int
    ram_available_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int
    hf_cache_dir: str
    hf_cache_free_bytes: int | None
    model_dir: str | None
    model_dir_free_bytes: int | None
    python_version: str


def detect_wsl(proc_version_text: str | None, environ: Mapping[str, str]) -> bool:
    """True under WSL: ``/proc/version`` mentions Microsoft, or ``WSL_DISTRO_NAME`` is set."""
    if environ.get("WSL_DISTRO_NAME"):
        return True
    return proc_version_text is not None and "microsoft" in proc_version_text.lower()


def cpu_model_from_cpuinfo(text: str | None) -> str | None:
    """The first ``model name`` (x86) or ``Model``/``Hardware`` (ARM) value of /proc/cpuinfo."""
    if not text:
        return None
    for key in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return None


def free_bytes_at(path: str | os.PathLike[str] | None) -> int | None:
    """Free bytes (for this user) on the file system of ``path`` or its nearest existing parent.

    None when ``path`` is None or no parent can be measured.
    """
    if path is None:
        return None
    candidate = Path(path).expanduser().absolute()
    for where in (candidate, *candidate.parents):
        if where.exists():
            try:
                return int(psutil.disk_usage(str(where)).free)
            except OSError:
                return None
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def proc_unreadable(exc: BaseException, proc_root: Path = Path("/proc")) -> ProcUnreadableError:
    """The one sentence for a ``/proc`` psutil cannot read (a container or chroot without it):
    the folder, what failed, and the fixes."""
    if isinstance(exc, OSError) and exc.filename:
        what = f"{os.fsdecode(exc.filename)} ({exc.strerror or exc})"
    elif isinstance(exc, psutil.AccessDenied):
        what = f"{proc_root} (access denied)"
    else:
        what = f"{proc_root} ({exc})"
    return ProcUnreadableError(
        f"kvpilot cannot read the machine's memory from {what}: {proc_root} is not mounted or "
        "not readable here (a container or chroot); mount it (mount -t proc proc /proc) or run "
        "kvpilot where it is visible, or plan for a GPU by name (--gpu, or planner mode in the "
        "window), which reads nothing of this machine"
    )


def read_system(
    model_dir: str | os.PathLike[str] | None = None,
    *,
    hf_cache_dir: str | os.PathLike[str] | None = None,
    proc_root: Path = Path("/proc"),
    environ: Mapping[str, str] | None = None,
) -> SystemSnapshot:
    """Read the host now.

    Args:
        model_dir: a directory that will hold model weights (free space reported), or None.
        hf_cache_dir: overrides the Hugging Face cache location (default:
            :func:`kvpilot.core.hub.cache.hub_cache_dir`, read now).
        proc_root: where ``version`` and ``cpuinfo`` are read (tests pass a folder).
        environ: environment used for WSL detection (default ``os.environ``).

    Raises:
        ProcUnreadableError: psutil cannot read the memory figures (``/proc`` hidden or unreadable;
            :func:`proc_unreadable` words it).
    """
    env = os.environ if environ is None else environ
    try:
        vm = psutil.virtual_memory()
        swap = psutil.swap_memory()
    except (OSError, psutil.Error) as exc:
        raise proc_unreadable(exc) from exc
    cache = str(hub_cache_dir(hf_cache_dir))
    try:
        pretty: str | None = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        pretty = None
    cpu_model = cpu_model_from_cpuinfo(_read_text(proc_root / "cpuinfo")) or (
        platform.processor() or None
    )
    return SystemSnapshot(
        os_name=platform.system(),
        os_release=platform.release(),
        os_pretty_name=pretty,
        is_wsl2=detect_wsl(_read_text(proc_root / "version"), env),
        cpu_model=cpu_model,
        cpu_cores_physical=_cpu_count(logical=False),
        cpu_cores_logical=_cpu_count(logical=True),
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        swap_total_bytes=int(swap.total),
        swap_free_bytes=int(swap.free),
        hf_cache_dir=cache,
        hf_cache_free_bytes=free_bytes_at(cache),
        model_dir=None if model_dir is None else str(model_dir),
        model_dir_free_bytes=free_bytes_at(model_dir),
        python_version=sys.version.split()[0],
    )


def _cpu_count(*, logical: bool) -> int | None:
    """psutil's CPU count; None where it cannot be read."""
    try:
        return psutil.cpu_count(logical=logical)
    except (OSError, psutil.Error):
        return None
