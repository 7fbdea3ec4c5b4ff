"""Python's cyclic garbage collector, run on the GUI thread only.

Qt objects must be destroyed on the thread they live on. Python's automatic collector runs on
whichever thread allocates when a threshold trips (in kvpilot most often a pool thread that
plans), and a widget held in a reference cycle (a dialog whose connected lambdas refer to it)
is destroyed by the collection that frees the cycle: "QBasicTimer::stop: Failed. Possibly
trying to stop from a different thread", then a crash in QtCore. :class:`GuiCollector` turns the
automatic collector off (:func:`kvpilot.core.app.startup_gc.collect_by_hand`) and runs the same
generational collection from a timer on the GUI thread, when the counts pass the thresholds
Python would have used; cycles wait at most :data:`INTERVAL_MS` longer than before.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

from kvpilot.core.app import startup_gc
from kvpilot.gui import threadcheck

#: how often the GUI thread checks whether a collection is due (milliseconds)
INTERVAL_MS = 500


def due_generation() -> int | None:
    """The oldest generation whose allocation count passed its threshold (None: none did)."""
    counts = gc.get_count()
    thresholds = gc.get_threshold()
    due = None
    for generation, (count, threshold) in enumerate(zip(counts, thresholds, strict=False)):
        if threshold > 0 and count > threshold:
            due = generation
    return due


class GuiCollector(QObject):
    """Collects cycles from a timer on the thread it was made on (the GUI thread)."""

    def __init__(self, interval_ms: int = INTERVAL_MS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("gui-collector")
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.collect_due)

    def start(self) -> None:
        """Turn the automatic collector off and collect here from now on."""
        startup_gc.collect_by_hand()
        self.timer.start()

    def stop(self) -> None:
        """Stop collecting here; the automatic collector runs again."""
        self.timer.stop()
        startup_gc.collect_automatically()

    def collect_due(self) -> int:
        """Run the collection Python would have run by now; returns the objects it freed (0
        while the start-up holds the collector or none is due)."""
        threadcheck.require_owner(self, "a cyclic collection")
        if startup_gc.holding():
            return 0
        generation = due_generation()
        return 0 if generation is None else gc.collect(generation)
