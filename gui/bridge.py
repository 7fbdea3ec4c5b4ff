"""The one way core threads talk to widgets: Qt signals delivered on the GUI thread.

Core objects (sampler, supervisor, scraper, load generator) call plain Python callbacks from their
own threads. :class:`CoreBridge` turns each callback into a signal emission; because the bridge
lives on the GUI thread, Qt queues the emission and the connected slots run on the GUI thread,
so no widget is ever touched from a core thread.

Signals:
    gpu_sample(object): a hardware sampler sample.
    server_event(object): a supervisor event (state, phase, capacity, log line, failure).
    metrics_sample(object): a scraped /metrics sample.
    load_progress(object): progress of a running load test.
    download_progress(object): progress of a model download before a launch.
    measure_phase(str): the words of a start-up phase a measured dry run ("Measure on this
        GPU") reached.
    message(str, str): (level, text) for the status bar.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal


class CoreBridge(QObject):
    """Signals for every callback that core objects make from their threads."""

    gpu_sample = Signal(object)
    server_event = Signal(object)
    metrics_sample = Signal(object)
    load_progress = Signal(object)
    download_progress = Signal(object)
    measure_phase = Signal(str)
    message = Signal(str, str)

    def emitter(self, signal_name: str) -> Callable[[object], None]:
        """A thread-safe callback that emits ``signal_name`` with its one argument."""
        signal = getattr(self, signal_name)

        def emit(payload: object) -> None:
            # the bridge may be deleted while a core thread still runs
            with contextlib.suppress(RuntimeError):
                signal.emit(payload)

        return emit
