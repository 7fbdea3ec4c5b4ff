"""Stand-in for NVIDIA's ``pynvml`` in tests: a recorded snapshot plus the faults tests inject.

The replay of a recording is the app's own (:mod:`kvpilot.core.hardware.recorded_nvml`, planner
mode). What only tests need is here: ``"lost_after_calls": N`` on a device makes every call on it
after its N-th raise ``NVMLError_GpuIsLost``, a GPU falling off the bus mid-session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testpaths import DATA

from kvpilot.core.hardware.recorded_nvml import (
    ERROR_CLASSES,
    NVMLError,
    RecordedNvml,
    load_recorded,
    snapshot_names,
)

DATA_DIR: Path = DATA / "nvml"

__all__ = ["DATA_DIR", "ERROR_CLASSES", "FakeNvml", "NVMLError", "load", "make", "shipped"]


class FakeNvml(RecordedNvml):
    """A recorded snapshot whose devices may be lost after a number of calls."""

    def _device(self, handle: Any, function: str) -> Any:
        device = super()._device(handle, function)
        lost_after = device.data.get("lost_after_calls")
        if lost_after is not None and device.calls > int(lost_after):
            self._raise("GPU_IS_LOST")
        return device

    def __repr__(self) -> str:
        return f"<FakeNvml replaying {self.source}>"


def load(name: str) -> FakeNvml:
    """A replay by name: a file in tests/data/nvml/ first, else a shipped snapshot."""
    path = DATA_DIR / f"{name}.json"
    recorded = load_recorded(path if path.exists() else name)
    return FakeNvml(recorded.snapshot, source=recorded.source)


def load_file(path: str | Path) -> FakeNvml:
    """A replay of any snapshot file, faults included (``--fake-nvml FILE`` in a test)."""
    recorded = load_recorded(path)
    return FakeNvml(recorded.snapshot, source=recorded.source)


def make(snapshot: dict[str, Any]) -> FakeNvml:
    """A replay of an in-memory snapshot (for one-off variations)."""
    return FakeNvml(snapshot, source="<test>")


def shipped() -> tuple[str, ...]:
    """Names of the snapshots shipped as resources."""
    return snapshot_names()
