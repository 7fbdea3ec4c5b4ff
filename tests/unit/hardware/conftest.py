"""Fixtures for the hardware tests: NVML replays and a clean log-once state."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import pytest
from fakes import pynvml_stub

from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.fake_nvml import FakeNvml
from kvpilot.core.hardware.system import SystemSnapshot


@pytest.fixture(autouse=True)
def _fresh_nvml_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees an empty log-once set and no replay selected through the environment."""
    monkeypatch.delenv(nvml_mod.FAKE_ENV, raising=False)
    nvml_mod._logged_once.clear()
    nvml_mod._fake_cache.clear()
    yield
    nvml_mod._logged_once.clear()
    nvml_mod._fake_cache.clear()


@pytest.fixture
def fake() -> Callable[[str], FakeNvml]:
    """``fake("rtx4090-desktop")`` -> a fresh replay."""
    return pynvml_stub.load


@pytest.fixture
def snapshot() -> Callable[[str], dict[str, Any]]:
    """``snapshot("rtx4090-desktop")`` -> a deep copy of the raw snapshot dict to modify."""

    def read(name: str) -> dict[str, Any]:
        path = pynvml_stub.DATA_DIR / f"{name}.json"
        if path.exists():
            return dict(json.loads(path.read_text()))
        entry = resources.files("kvpilot.resources") / f"nvml_{name}.json"
        return copy.deepcopy(json.loads(entry.read_text()))

    return read


@pytest.fixture
def system() -> SystemSnapshot:
    """A fixed host so GPU tests do not depend on this machine."""
    return SystemSnapshot(
        os_name="Linux",
        os_release="6.8.0",
        os_pretty_name="Ubuntu 24.04 LTS",
        is_wsl2=False,
        cpu_model="AMD Ryzen 9 7950X 16-Core Processor",
        cpu_cores_physical=16,
        cpu_cores_logical=32,
        ram_total_bytes=64 * 1024**3,
        ram_available_bytes=48 * 1024**3,
        swap_total_bytes=8 * 1024**3,
        swap_free_bytes=8 * 1024**3,
        hf_cache_dir="/home/dev/.cache/huggingface/hub",
        hf_cache_free_bytes=500 * 1024**3,
        model_dir=None,
        model_dir_free_bytes=None,
        python_version="3.11.7",
    )
