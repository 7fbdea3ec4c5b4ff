"""Run blocking calls (probe, recommend, file reads) off the GUI thread.

:func:`run_in_pool` hands a function to the global ``QThreadPool`` and calls ``on_result`` or
``on_error`` on the GUI thread when it finishes. Results arrive through a queued signal of a
small carrier object, never by touching widgets from the worker thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

log = logging.getLogger("kvpilot.gui")

_live: set[_Carrier] = set()  # keeps carriers alive until their signal has been delivered


class _Carrier(QObject):
    done = Signal(object, object)  # (result, exception)


class _Task(QRunnable):
    def __init__(self, fn: Callable[[], Any], carrier: _Carrier) -> None:
        super().__init__()
        self._fn = fn
        self._carrier = carrier

    def run(self) -> None:
        try:
            result = self._fn()
        except BaseException as exc:  # noqa: BLE001 - delivered to on_error on the GUI thread
            self._carrier.done.emit(None, exc)
        else:
            self._carrier.done.emit(result, None)


def run_in_pool(
    fn: Callable[[], Any],
    on_result: Callable[[Any], None],
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Run ``fn()`` on a pool thread; deliver its result or exception on the GUI thread.

    Must be called from the GUI thread (the carrier is created there so that the delivery is
    queued onto it).
    """
    carrier = _Carrier()
    _live.add(carrier)

    def deliver(result: Any, exc: BaseException | None) -> None:
        _live.discard(carrier)
        carrier.deleteLater()
        if exc is None:
            on_result(result)
        elif on_error is not None:
            on_error(exc)
        else:
            log.error("background task failed", exc_info=exc)

    carrier.done.connect(deliver)
    QThreadPool.globalInstance().start(_Task(fn, carrier))


def drain(timeout_ms: int = 30_000) -> bool:
    """Run the pool dry: wait for the tasks, deliver their results, and repeat while delivered
    results started new tasks. True when nothing is pending any more (then no result can reach
    a widget that is deleted next)."""
    from time import monotonic

    from PySide6.QtCore import QCoreApplication

    deadline = monotonic() + timeout_ms / 1000
    while True:
        left_ms = max(0, int((deadline - monotonic()) * 1000))
        idle = QThreadPool.globalInstance().waitForDone(left_ms)
        QCoreApplication.processEvents()
        if idle and not _live and QThreadPool.globalInstance().activeThreadCount() == 0:
            return True
        if monotonic() >= deadline:
            return False


def wait_for_pool(timeout_ms: int = 10_000) -> bool:
    """Wait until every pooled task finished (tests, shutdown); True when the pool is idle."""
    return QThreadPool.globalInstance().waitForDone(timeout_ms)
