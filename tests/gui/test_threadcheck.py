"""The debug check that every Qt object is used on its own thread (kvpilot.gui.threadcheck),
and the GUI-thread collector it guards (kvpilot.gui.collector)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

from PySide6.QtCore import QObject

from kvpilot.core.app import startup_gc
from kvpilot.gui import threadcheck, workers
from kvpilot.gui.collector import GuiCollector, due_generation

PROBE = Path(__file__).with_name("threadcheck_probe.py")


def _on_thread(fn) -> BaseException | None:
    caught: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            caught.append(exc)

    t = threading.Thread(target=run, name="wrong-thread")
    t.start()
    t.join()
    return caught[0] if caught else None


def test_the_check_is_on_in_the_tests() -> None:
    assert threadcheck.enabled()


def test_an_object_used_off_its_thread_is_caught(qapp) -> None:
    obj = QObject()
    threadcheck.require_owner(obj, "a test")  # its own thread: fine
    exc = _on_thread(lambda: threadcheck.require_owner(obj, "a result delivered"))
    assert isinstance(exc, threadcheck.WrongThreadError)
    seen = threadcheck.take_violations()
    assert len(seen) == 1
    assert "a result delivered: QObject used off its thread" in seen[0]
    assert "'wrong-thread'" in seen[0]


def test_a_worker_result_delivered_off_the_gui_thread_is_caught(qtbot) -> None:
    got: list[str] = []
    workers.run_in_pool(lambda: "planned", got.append)
    qtbot.waitUntil(lambda: got == ["planned"])
    dispatcher = workers._dispatch()
    exc = _on_thread(lambda: dispatcher._deliver(0, "late", None))
    assert isinstance(exc, threadcheck.WrongThreadError)
    assert "a worker's result delivered" in threadcheck.take_violations()[0]


def test_a_job_starts_only_from_the_gui_thread(qapp) -> None:
    workers._dispatch()
    exc = _on_thread(lambda: workers.run_in_pool(lambda: 1, lambda _r: None))
    assert isinstance(exc, threadcheck.WrongThreadError)
    assert "a background job started" in threadcheck.take_violations()[0]


def _probe(mode: str) -> list[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", threadcheck.ENV_VAR: "1"}
    out = subprocess.run(
        [sys.executable, str(PROBE), mode], capture_output=True, text=True, timeout=120, env=env
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_check_catches_a_dialog_freed_by_a_collection_on_a_worker_thread() -> None:
    """What crashed the window: the automatic collector, tripped by a planning thread's
    allocations, freed a dialog held in a reference cycle on that thread."""
    lines = _probe("automatic")
    assert lines[-1] == "freed on planning-worker"
    violations = [ln for ln in lines if ln.startswith("VIOLATION")]
    assert violations, lines
    assert all("on thread 'planning-worker'" in v for v in violations)
    assert any("Timers cannot be stopped from another thread" in v for v in violations)


def test_with_the_gui_collector_the_dialog_is_freed_on_the_gui_thread() -> None:
    lines = _probe("gui-collector")
    assert lines == ["freed on MainThread"]


def test_a_collection_off_the_gui_thread_while_collecting_by_hand_is_caught(qapp) -> None:
    startup_gc.collect_by_hand()
    try:
        assert not gc.isenabled()
        assert _on_thread(gc.collect) is None
    finally:
        startup_gc.collect_automatically()
    seen = threadcheck.take_violations()
    assert len(seen) == 1 and "cyclic collection off the GUI thread" in seen[0]
    assert "'wrong-thread'" in seen[0]


class _Cyclic(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.me = self


def test_the_collector_frees_cycles_on_the_gui_thread_when_a_generation_is_due(qtbot) -> None:
    collector = GuiCollector(interval_ms=20)
    freed_on: list[str] = []
    collector.start()
    try:
        assert not gc.isenabled() and startup_gc.by_hand()
        obj = _Cyclic()
        weakref.finalize(obj, lambda: freed_on.append(threading.current_thread().name))
        del obj

        kept: list[list[int]] = []

        def allocate() -> None:  # a worker's allocations trip no collection there
            kept.extend([i] for i in range(5 * gc.get_threshold()[0]))

        assert _on_thread(allocate) is None
        assert freed_on == []
        assert due_generation() is not None
        qtbot.waitUntil(lambda: freed_on == ["MainThread"], timeout=5000)
    finally:
        collector.stop()
    assert gc.isenabled() and not startup_gc.by_hand()


def test_settle_after_start_leaves_the_collector_off_while_collecting_by_hand() -> None:
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        assert startup_gc.hold_during_start()
        startup_gc.collect_by_hand()
        assert startup_gc.settle_after_start() is not None
        assert not gc.isenabled()
        startup_gc.collect_automatically()
        assert gc.isenabled()
    finally:
        gc.unfreeze()
        (gc.enable if was_enabled else gc.disable)()
