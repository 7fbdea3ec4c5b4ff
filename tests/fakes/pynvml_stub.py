"""Stand-in for NVIDIA's ``pynvml`` in tests: the snapshot replay kvpilot ships.

The implementation lives in :mod:`kvpilot.core.hardware.fake_nvml` because ``kvpilot gpu
--fake-nvml`` and the GUI's ``--fake-gpu`` use it too; tests import it from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvpilot.core.hardware.fake_nvml import (
    ERROR_CLASSES,
    FakeNvml,
    NVMLError,
    load_fake,
    snapshot_names,
)

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "nvml"

__all__ = ["DATA_DIR", "ERROR_CLASSES", "FakeNvml", "NVMLError", "load", "load_fake", "make"]


def load(name: str) -> FakeNvml:
    """A replay by name: a file in tests/data/nvml/ first, else a shipped snapshot."""
    path = DATA_DIR / f"{name}.json"
    return load_fake(path if path.exists() else name)


def make(snapshot: dict[str, Any]) -> FakeNvml:
    """A replay of an in-memory snapshot (for one-off variations)."""
    return FakeNvml(snapshot, source="<test>")


def shipped() -> tuple[str, ...]:
    """Names of the snapshots shipped as resources."""
    return snapshot_names()
