"""No dead code: ``vulture`` finds no unused function, method, class, property or import.

Uses by the tests, benchmarks and packaging scripts count (a test-only helper is alive). Qt calls
the event handlers it overrides by name (logging its ``handleError``, uvicorn its server's
``capture_signals``), and
``core/hardware/recorded_nvml.py`` mirrors pynvml's API (reached by attribute on the module); those
are the only exceptions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from testpaths import REPO

vulture = pytest.importorskip("vulture")


SCANNED = ("core", "gui", "tests", "benchmarks", "packaging")
CHECKED_KINDS = {"function", "method", "class", "property", "import"}
#: methods of Qt and logging classes overridden here, called by those frameworks
QT_OVERRIDES = {
    "closeEvent",
    "sizeHint",
    "minimumSizeHint",
    "paintEvent",
    "mouseMoveEvent",
    "resizeEvent",
    "showEvent",
    "keyPressEvent",
    "event",
    "eventFilter",  # QObject's, called for the events of the objects it is installed on
    "handleError",  # logging.Handler's, called by logging
    "capture_signals",  # uvicorn.Server's, called by its run (core/front/server.py)
    # QLayout's, called by Qt's layout engine (gui/widgets/flow_layout.py)
    "itemAt",
    "expandingDirections",
    "hasHeightForWidth",
}
#: files that implement an outside API whose callers are outside the project
MIRRORS = {"core/hardware/recorded_nvml.py"}


def test_vulture_finds_no_unused_definitions() -> None:
    v = vulture.Vulture()
    v.scavenge([str(REPO / p) for p in SCANNED], exclude=["*/.venv*", "*/.cache/*"])
    unused = sorted(
        f"{Path(item.filename).relative_to(REPO)}:{item.first_lineno}: {item.typ} {item.name}"
        for item in v.get_unused_code(min_confidence=60)
        if item.typ in CHECKED_KINDS
        and item.name not in QT_OVERRIDES
        and str(Path(item.filename).relative_to(REPO)).split("/")[0] in ("core", "gui")
        and str(Path(item.filename).relative_to(REPO)) not in MIRRORS
    )
    assert unused == []
