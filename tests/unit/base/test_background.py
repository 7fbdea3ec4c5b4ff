"""BackgroundLoop: one thread at a time, stop without waiting, a stuck thread is kept, ``with``
stops it however the block ends; notify logs a listener's exception instead of raising it."""

from __future__ import annotations

import logging
import threading

import pytest

from kvpilot.core.base.background import BackgroundLoop, notify


class _Loop(BackgroundLoop):
    def __init__(self, release: threading.Event | None = None) -> None:
        super().__init__("kvpilot-test-loop")
        self.ticks = 0
        self.release = release

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ticks += 1
            self._wake.wait(0.01)
        if self.release is not None:  # a thread slow to finish after it was told to stop
            self.release.wait(5)


def test_start_is_idempotent_and_stop_ends_the_thread() -> None:
    loop = _Loop()
    loop.start()
    first = loop._thread
    loop.start()
    assert loop._thread is first and loop.running
    assert sum(t.name == "kvpilot-test-loop" for t in threading.enumerate()) == 1
    loop.stop()
    assert not loop.running and loop._thread is None
    assert first is not None and not first.is_alive()


def test_stop_without_waiting_keeps_a_live_thread_for_the_next_stop() -> None:
    release = threading.Event()
    loop = _Loop(release)
    loop.start()
    loop.stop(timeout_s=0)
    assert loop.running  # told to stop, still finishing
    loop.start()  # no second thread beside the one still alive
    assert sum(t.name == "kvpilot-test-loop" for t in threading.enumerate()) == 1
    release.set()
    loop.stop(timeout_s=5)
    assert not loop.running


def test_with_runs_the_loop_for_the_block_and_stops_it_when_the_block_raises() -> None:
    loop = _Loop()
    with loop as entered:
        assert entered is loop and loop.running
    assert not loop.running
    with pytest.raises(RuntimeError), loop:
        raise RuntimeError("boom")
    assert not loop.running


def test_subclass_without_a_loop_is_an_error() -> None:
    with pytest.raises(NotImplementedError):
        BackgroundLoop("kvpilot-empty")._run()


def test_notify_passes_the_arguments_and_logs_what_the_listener_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[int, str]] = []
    log = logging.getLogger("kvpilot.test.notify")
    notify(log, "test listener", lambda n, s: seen.append((n, s)), 1, "a")
    assert seen == [(1, "a")]

    def broken(_value: int) -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="kvpilot.test.notify"):
        notify(log, "test listener", broken, 2)
    [record] = caplog.records
    assert record.getMessage() == "test listener failed"
    assert record.exc_info is not None and record.exc_info[0] is ValueError
