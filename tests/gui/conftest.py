"""GUI test set-up: offscreen Qt, settings and data in temporary folders, recorded GPUs.

NVML is replaced at the library boundary by the core's replay of recorded snapshots
(``kvpilot.core.hardware.recorded_nvml``), so every GUI test runs the production probe, sampler and
launch-budget code. The end-to-end fixtures (real vLLM CPU server, tiny model) are re-exported
from tests/e2e/conftest.py for test_main_window_e2e.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e.conftest import (  # noqa: F401 - re-exported for test_main_window_e2e.py
    launch_spec,
    tiny_model,
    vllm_runtime,
    vllm_scratch,
)
from guikit import close_windows, open_window

import kvpilot.gui  # noqa: F401 - pins pyqtgraph to PySide6 before it is imported
from kvpilot.core.app import settings as st
from kvpilot.gui import app as gui_app
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.main_window import MainWindow
from kvpilot.gui.services import AppServices

TESTS = Path(__file__).resolve().parents[1]
FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Settings, data and cache in tmp; no vLLM reachable unless a test provides one."""
    monkeypatch.setenv(st.CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    monkeypatch.delenv("KVPILOT_FAKE_NVML", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no vllm on PATH
    return tmp_path


@pytest.fixture
def store(tmp_path: Path) -> st.SettingsStore:
    return st.SettingsStore(tmp_path / "config")


@pytest.fixture
def make_window(qtbot, store: st.SettingsStore) -> Iterator[Callable[..., MainWindow]]:
    """Factory: a main window on a recorded GPU (default the RTX 4090 desktop snapshot)."""
    windows: list[MainWindow] = []

    def make(
        fake_gpu: str = "rtx4090-desktop",
        *,
        wait: bool = True,
        confirm_stop: Callable[[], bool] = lambda: True,
        **kw,
    ) -> MainWindow:
        window = open_window(fake_gpu, store=store, confirm_stop=confirm_stop, **kw)
        windows.append(window)
        if wait:
            qtbot.waitUntil(lambda: gui_app.loaded(window), timeout=30_000)
        return window

    yield make
    close_windows(windows)


@pytest.fixture
def make_services() -> Iterator[Callable[[str, Path], AppServices]]:
    """Factory: the window's services on a recorded GPU (``rtx4090-desktop``...) with their data
    in a folder, without a window; shut down after the test."""
    made: list[AppServices] = []

    def make(fake_gpu: str, data_dir: Path) -> AppServices:
        services = AppServices(CoreBridge(), fake_gpu=fake_gpu, data_dir=data_dir)
        made.append(services)
        return services

    yield make
    for services in made:
        services.shutdown()
