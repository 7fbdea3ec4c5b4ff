"""Unhandled errors: logged with their traceback, shown once in a dialog naming the log file,
from the GUI thread and from worker threads; the app keeps running."""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path

from PySide6.QtWidgets import QWidget

from kvpilot.gui import crash


def test_an_unhandled_error_is_logged_and_shown_with_the_log_path(qtbot, tmp_path: Path,
                                                                  monkeypatch) -> None:
    log_file = tmp_path / "kvpilot.log"
    handler = logging.FileHandler(log_file)
    logging.getLogger("kvpilot").addHandler(handler)
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    parent = QWidget()
    qtbot.addWidget(parent)
    reporter = crash.CrashReporter(log_file, parent)
    crash.install(reporter)
    try:
        with qtbot.waitSignal(reporter.crashed, timeout=5_000):
            try:
                raise ValueError("the plan table lost a row")
            except ValueError:
                sys.excepthook(*sys.exc_info())
        assert reporter.dialog is not None
        text = reporter.dialog.informativeText()
        assert "ValueError: the plan table lost a row" in text
        assert str(log_file) in text and "keeps running" in text
        first = reporter.dialog
        # a crash in a worker thread arrives through the queued signal; within the interval no
        # second dialog opens
        worker = threading.Thread(target=lambda: 1 / 0, name="kvpilot-test-worker")
        with qtbot.waitSignal(reporter.crashed, timeout=5_000):
            worker.start()
            worker.join()
        assert reporter.dialog is first
    finally:
        logging.getLogger("kvpilot").removeHandler(handler)
        handler.close()
    logged = log_file.read_text()
    assert "Traceback" in logged and "the plan table lost a row" in logged
    assert "ZeroDivisionError" in logged and "kvpilot-test-worker" in logged
    reporter.dialog.close()
