"""Run blocking calls (probe, recommend, file reads) off the GUI thread.

:func:`run_in_pool` hands a short function (well under a second or two: a probe, a plan, a
file read) to the global ``QThreadPool``; :func:`run_in_thread` runs a long one (a model
download followed by a launch) on its own thread so that it never holds a pool thread that
planning needs. Both call ``on_result`` or ``on_error`` on the GUI thread when the function
finishes.

A worker thread holds no Qt object: it emits the outcome with a job number on one dispatcher
that lives on the GUI thread for the whole run (a queued signal), and the callbacks, the
function and everything they hold stay in a table that only the GUI thread reads and empties.
So no Qt object (a dialog a callback refers to, a carrier) can lose its last reference, and be
destroyed, on a worker thread. :mod:`kvpilot.gui.threadcheck` checks the delivery.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from PySide6.QtCore import QCoreApplication, QObject, QRunnable, Qt, QThreadPool, Signal, Slot
from shiboken6 import Shiboken

from kvpilot.gui import threadcheck

log = logging.getLogger("kvpilot.gui")

T = TypeVar("T")


@dataclass(frozen=True)
class _Job:
    """What the GUI thread keeps of a job until its outcome is delivered."""

    fn: Callable[[], Any]
    on_result: Callable[[Any], None]
    on_error: Callable[[BaseException], None] | None
    owner: QObject | None = None  # a widget whose deletion drops the outcome


class _Dispatcher(QObject):
    """Lives on the GUI thread; worker threads emit ``done`` on it (queued to the GUI thread)."""

    done = Signal(int, object, object)  # (job number, result, exception)

    def __init__(self) -> None:
        super().__init__()
        self.jobs: dict[int, _Job] = {}
        self.done.connect(self._deliver, Qt.ConnectionType.QueuedConnection)

    @Slot(int, object, object)
    def _deliver(self, number: int, result: object, exc: object) -> None:
        threadcheck.require_owner(self, "a worker's result delivered")
        job = self.jobs.pop(number, None)
        if job is None or (job.owner is not None and not Shiboken.isValid(job.owner)):
            return  # the widget that asked was closed and deleted meanwhile
        if exc is None:
            job.on_result(result)
        elif job.on_error is not None:
            assert isinstance(exc, BaseException)
            job.on_error(exc)
        else:
            assert isinstance(exc, BaseException)
            log.error("background task failed", exc_info=exc)


_dispatcher: _Dispatcher | None = None
_numbers = itertools.count(1)


def _dispatch() -> _Dispatcher:
    """The dispatcher (made on first use, which must be on the GUI thread)."""
    global _dispatcher
    if _dispatcher is None:
        app = QCoreApplication.instance()
        if app is not None and threading.current_thread() is not threading.main_thread():
            raise threadcheck.WrongThreadError(
                "run_in_pool/run_in_thread was first called off the GUI thread"
            )
        _dispatcher = _Dispatcher()
    return _dispatcher


def _register(
    fn: Callable[[], T],
    on_result: Callable[[T], None],
    on_error: Callable[[BaseException], None] | None,
    owner: QObject | None = None,
) -> int:
    dispatcher = _dispatch()
    threadcheck.require_owner(dispatcher, "a background job started")
    number = next(_numbers)
    dispatcher.jobs[number] = _Job(fn, on_result, on_error, owner)
    return number


def _work(number: int, fn: Callable[[], Any]) -> None:
    """Run ``fn`` on the calling (worker) thread and emit its outcome; holds nothing after."""
    try:
        result = fn()
    except BaseException as exc:  # noqa: BLE001 - delivered to on_error on the GUI thread
        del fn
        _emit(number, None, exc)
    else:
        del fn
        _emit(number, result, None)


def _emit(number: int, result: object, exc: BaseException | None) -> None:
    dispatcher = _dispatcher
    if dispatcher is None:
        return
    with contextlib.suppress(RuntimeError):  # the dispatcher was deleted (the app is ending)
        dispatcher.done.emit(number, result, exc)


class _Task(QRunnable):
    """A pool task that knows only its job number and function (dropped before it reports)."""

    def __init__(self, number: int, fn: Callable[[], Any]) -> None:
        super().__init__()
        self._number = number
        self._fn: Callable[[], Any] | None = fn

    def run(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            _work(self._number, fn)


def run_in_pool(
    fn: Callable[[], T],
    on_result: Callable[[T], None],
    on_error: Callable[[BaseException], None] | None = None,
    *,
    owner: QObject | None = None,
) -> None:
    """Run ``fn()`` on a pool thread; deliver its result or exception on the GUI thread, unless
    ``owner`` (the widget whose callbacks these are) has been deleted by then.

    Must be called from the GUI thread (raises :class:`~kvpilot.gui.threadcheck.WrongThreadError`
    elsewhere while the thread check is on).
    """
    number = _register(fn, on_result, on_error, owner)
    QThreadPool.globalInstance().start(_Task(number, fn))


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
    number = _register(fn, on_result, on_error)
    box: list[Callable[[], Any]] = [fn]

    def run() -> None:
        try:
            _work(number, box.pop())
        finally:
            _threads.discard(threading.current_thread())

    t = threading.Thread(target=run, name=name, daemon=True)
    _threads.add(t)
    t.start()
    return t


def pending() -> int:
    """How many jobs have not had their outcome delivered yet."""
    return len(_dispatcher.jobs) if _dispatcher is not None else 0


def drain(timeout_ms: int = 30_000) -> bool:
    """Run the pool dry: wait for the tasks, deliver their results, and repeat while delivered
    results started new tasks. True when nothing is pending any more (then no result can reach
    a widget that is deleted next)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        idle = QThreadPool.globalInstance().waitForDone(left_ms)
        QCoreApplication.processEvents()
        if idle and not pending() and QThreadPool.globalInstance().activeThreadCount() == 0:
            return True
        if time.monotonic() >= deadline:
            if not idle or pending():
                log.warning("%d background job(s) still pending after %d ms", pending(),
                            timeout_ms)
            return False


def wait_for_pool(timeout_ms: int = 10_000) -> bool:
    """Wait until every pooled task and :func:`run_in_thread` thread finished (tests, shutdown);
    True when all are done."""
    deadline = time.monotonic() + timeout_ms / 1000
    for t in list(_threads):
        t.join(max(0.0, deadline - time.monotonic()))
    left_ms = max(0, int((deadline - time.monotonic()) * 1000))
    return QThreadPool.globalInstance().waitForDone(left_ms) and not _threads
