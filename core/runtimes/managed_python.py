"""uv's managed Python for a runtime's environment, where the machine has no Python that fits.

A minimal desktop may have no Python at all, and Ubuntu 20.04's 3.8 is older than any vLLM build
accepts. When :class:`~kvpilot.core.runtimes.installer.RuntimeInstaller` finds no interpreter in
the release's ``requires_python`` range and uv is available (the packaged kvpilot carries it),
the environment is made by ``uv venv --managed-python --python <range>``: uv downloads a
standalone CPython in that range (python-build-standalone builds; ``UV_PYTHON_INSTALL_MIRROR``
and ``UV_PYTHON_DOWNLOADS_JSON_URL`` point it elsewhere, as uv documents) into kvpilot's data
directory, ``<data_dir>/runtimes/python/``, so it goes with the runtimes it serves.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base.programs import run_for_output
from kvpilot.core.runtimes import store

#: the marker :class:`ManagedPython` puts in place of an interpreter's path
MANAGED_PREFIX = "uv-managed:"


@dataclass(frozen=True)
class ManagedPython:
    """A Python that uv is to provide: ``request`` is the version range uv is asked for."""

    request: str

    @property
    def path(self) -> str:
        """What the installer shows where an interpreter's path would be."""
        return f"{MANAGED_PREFIX}{self.request}"


def bundled_uv() -> str | None:
    """The ``uv`` binary the packaged kvpilot carries (``_internal/uv/uv``); None when not
    frozen or not there."""
    base = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or not base:
        return None
    path = Path(base) / "uv" / "uv"
    return str(path) if path.is_file() else None


def install_dir(data_dir: Path | None = None) -> Path:
    """Where uv keeps the Pythons it downloads for kvpilot: ``<data_dir>/runtimes/python``."""
    return store.runtimes_root(data_dir) / "python"


def uv_env(data_dir: Path | None = None) -> dict[str, str]:
    """Environment for the uv call that fetches the Python: kvpilot's own install folder, and
    downloads allowed (that is the point of this path)."""
    return {"UV_PYTHON_INSTALL_DIR": str(install_dir(data_dir)), "UV_PYTHON_DOWNLOADS": "automatic"}


def venv_argv(uv: str, python: ManagedPython, target: Path) -> list[str]:
    """``uv venv`` with a managed Python in ``python.request``'s range, at ``target``."""
    return [
        uv, "venv", "--allow-existing", "--managed-python", "--python", python.request,
        str(target),
    ]  # fmt: skip


def describe(python: ManagedPython) -> str:
    """One line for the log and the install progress."""
    return (
        f"no Python on this machine fits ({python.request}); uv provides one (managed Python, "
        f"kept in {install_dir()})"
    )


def downloadable(uv: str, request: str, data_dir: Path | None = None) -> list[str]:
    """Versions uv can download for ``request`` (newest first; from its own download list, or
    the one ``UV_PYTHON_DOWNLOADS_JSON_URL`` names); empty when none or uv fails."""
    env = dict(os.environ, **uv_env(data_dir), NO_COLOR="1")
    argv = [
        uv, "python", "list", request, "--only-downloads", "--managed-python",
        "--output-format", "json",
    ]  # fmt: skip
    try:
        proc = run_for_output(argv, 60, env)
        entries = json.loads(proc.stdout) if proc.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return [str(e["version"]) for e in entries if isinstance(e, dict) and "version" in e]
