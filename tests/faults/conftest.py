"""Fault tests: the GUI fixtures (offscreen window on a recorded GPU, isolated folders), the
end-to-end fixtures (real vLLM CPU server, tiny model) and an event-loop lateness probe."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from e2e.conftest import (  # noqa: F401 - re-exported fixtures
    launch_spec,
    tiny_model,
    vllm_runtime,
    vllm_scratch,
)
from faultkit import LoopProbe


def _gui_fixtures() -> ModuleType:
    # tests/gui/conftest.py by path: the name ``gui`` is kvpilot's own GUI package here
    path = Path(__file__).resolve().parents[1] / "gui" / "conftest.py"
    spec = importlib.util.spec_from_file_location("kvpilot_tests_gui_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gui = _gui_fixtures()
isolated_dirs = _gui.isolated_dirs
make_window = _gui.make_window
store = _gui.store

@pytest.fixture
def loop_probe(qtbot) -> Iterator[LoopProbe]:
    from PySide6.QtCore import Qt, QTimer

    probe = LoopProbe()
    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.timeout.connect(probe.tick)
    timer.start(int(probe.interval_s * 1000))
    probe.tick()
    yield probe
    timer.stop()
