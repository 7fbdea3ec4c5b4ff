"""The bridge hands core-thread callbacks and pool results to the GUI thread."""

from __future__ import annotations

import threading

from PySide6.QtCore import QThread
from PySide6.QtWidgets import QApplication
from testpaths import DATA

from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.workers import run_in_pool

METRICS = DATA / "metrics"


def test_core_thread_callbacks_arrive_on_the_gui_thread(qtbot) -> None:
    bridge = CoreBridge()
    seen: list[tuple[object, bool]] = []
    gui_thread = QApplication.instance().thread()
    bridge.server_event.connect(lambda ev: seen.append((ev, QThread.currentThread() is gui_thread)))
    emit = bridge.emitter("server_event")
    t = threading.Thread(target=lambda: [emit(i) for i in range(5)])
    with qtbot.waitSignals([bridge.server_event] * 5, timeout=5000):
        t.start()
    t.join()
    assert [ev for ev, _ in seen] == list(range(5))
    assert all(on_gui for _, on_gui in seen)


def test_pool_work_reports_results_and_errors_on_the_gui_thread(qtbot) -> None:
    results: list[object] = []
    gui_thread = QApplication.instance().thread()

    def work() -> str:
        assert QThread.currentThread() is not gui_thread
        return "done"

    run_in_pool(work, lambda r: results.append((r, QThread.currentThread() is gui_thread)))
    run_in_pool(lambda: 1 / 0, lambda _r: None, lambda e: results.append(type(e).__name__))
    qtbot.waitUntil(lambda: len(results) == 2, timeout=5000)
    assert ("done", True) in results and "ZeroDivisionError" in results
