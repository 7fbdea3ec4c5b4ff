"""One daemon thread that runs a loop until asked to stop: what the GPU and /metrics samplers share.

Subclasses implement :meth:`BackgroundLoop._run`, waiting between ticks on ``self._wake`` (set by
:meth:`BackgroundLoop.stop`, and by anything else that wants the loop to look again now) and
ending when ``self._stop`` is set. :func:`notify` hands a result to a listener without letting the
listener's exception end the thread that calls it. :class:`StartStop` makes anything with
``start``/``stop`` a context manager (the loops here, and the tests' fake Hub).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

_P = ParamSpec("_P")
_S = TypeVar("_S", bound="StartStop")


def notify(
    log: logging.Logger,
    what: str,
    listener: Callable[_P, object],
    *args: _P.args,
    **kwargs: _P.kwargs,
) -> None:
    """Call ``listener``; whatever it raises is logged on ``log`` as "``what`` failed", with the
    traceback, and goes no further: a faulty listener must not stop the loop that informs it."""
    try:
        listener(*args, **kwargs)
    except Exception:
        log.exception("%s failed", what)


class StartStop:
    """``with obj:`` calls ``obj.start()`` and, on the way out (whatever the block raised),
    ``obj.stop()``; the ``with`` target is ``obj``. Subclasses implement both methods."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BackgroundLoop(StartStop):
    """Start / stop / running for one named daemon thread (``with loop:`` runs it for the block)."""

    def __init__(self, thread_name: str) -> None:
        self._thread_name = thread_name
        self._stop = threading.Event()
        self._wake = threading.Event()  # ends the loop's current wait early
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (no-op when it runs). Returns immediately."""
        if self.running:
            return
        self._stop.clear()
        self._wake.clear()
        self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Ask the thread to end and wait up to ``timeout_s`` seconds (0: do not wait).

        A thread still alive after the wait is kept, so a later ``stop`` can wait for it and
        ``start`` does not run a second one beside it.
        """
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is None:
            return
        if thread is not threading.current_thread() and timeout_s > 0:
            thread.join(timeout_s)
        if not thread.is_alive():
            self._thread = None

    def _run(self) -> None:
        raise NotImplementedError
