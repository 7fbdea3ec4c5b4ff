"""Run blocking calls (probe, recommend, file reads) off the GUI thread.

:func:`run_in_pool` hands a short function (well under a second or two: a probe, a plan, a
file read) to the global ``QThreadPool``; :func:`run_in_thread` runs a long one (a model
download followed by a launch) on its own thread so that it never holds a pool thread that
planning needs. Both call ``on_result`` or ``on_error`` on the GUI thread when the function
finishes. Results arrive through a queued signal of a small carrier object, never by touching
widgets from the worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

log = logging.getLogger("kvpilot.gui")

T = TypeVar("T")

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
    fn: Callable[[], T],
    on_result: Callable[[T], None],
    on_error: Callable[[BaseException], None] | None = None,
) -> None:
    """Run ``fn()`` on a pool thread; deliver its result or exception on the GUI thread.

    Must be called from the GUI thread (the carrier is created there so that the delivery is
    queued onto it).
    """
    carrier = _carrier_for(on_result, on_error)
    QThreadPool.globalInstance().start(_Task(fn, carrier))


def _carrier_for(
    on_result: Callable[[T], None], on_error: Callable[[BaseException], None] | None
) -> _Carrier:
    carrier = _Carrier()
    _live.add(carrier)

    def deliver(result: T, exc: BaseException | None) -> None:
        _live.discard(carrier)
        carrier.deleteLater()
        if exc is None:
            on_result(result)
        elif on_error is not None:
            on_error(exc)
        else:
            log.error("background task failed", exc_info=exc)

    carrier.done.connect(deliver)
    return carrier


_threads: set[threading.Thread] = set()


def run_in_thread(
    fn: Callable[[], T],
    on_result: Callable[[T], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    name: str = "kvpilot-task",
) -> threading.Thread:
    """Run a long ``fn()`` on a thread of its own; deliver its outcome on the GUI thread.

    Must be called from the GUI thread. Returns the (daemon) thread, already started.
    """
    carrier = _carrier_for(on_result, on_error)
    task = _Task(fn, carrier)

    def run() -> None:
        try:
            task.run()
        finally:
            _threads.discard(threading.current_thread())

    t = threading.Thread(target=run, name=name, daemon=True)
    _threads.add(t)
    t.start()
    return t


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
    """Wait until every pooled task and :func:`run_in_thread` thread finished (tests, shutdown);
    True when all are done."""
    deadline = time.monotonic() + timeout_ms / 1000
    for t in list(_threads):
        t.join(max(0.0, deadline - time.monotonic()))
    left_ms = max(0, int((deadline - time.monotonic()) * 1000))
    return QThreadPool.globalInstance().waitForDone(left_ms) and not _threads
