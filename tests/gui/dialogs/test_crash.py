"""Unhandled errors: logged with their traceback, shown once in a dialog naming the log file,
from the GUI thread and from worker threads; the app keeps running."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from PySide6.QtWidgets import QWidget

from kvpilot.core.app import native_crash
from kvpilot.gui.dialogs import crash


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


# ------------------------------------------------------------------ a crash below Python

CRASH_WITH_THE_APPS_HANDLER = """
import faulthandler
from kvpilot.core.app import logsetup
from kvpilot.gui.app import arm_crash_report
assert arm_crash_report(logsetup.configure()) is None  # no earlier crash
faulthandler._sigsegv()
"""


def _app_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "QT_QPA_PLATFORM": "offscreen",
            "KVPILOT_CONFIG_DIR": str(tmp_path / "config"),
            "KVPILOT_DATA_DIR": str(tmp_path / "data"),
            "KVPILOT_CACHE_DIR": str(tmp_path / "cache")}


def test_a_native_crash_is_kept_and_the_next_start_offers_it(tmp_path: Path) -> None:
    env = _app_env(tmp_path)
    logs = tmp_path / "data" / "logs"
    crashed = subprocess.run([sys.executable, "-c", CRASH_WITH_THE_APPS_HANDLER], env=env,
                             capture_output=True, text=True, timeout=120)
    assert crashed.returncode == -signal.SIGSEGV, crashed.stderr
    assert "Segmentation fault" in native_crash.crash_file(logs).read_text(encoding="utf-8")

    # the next start: the real app, until its window is up and it has said so in its log
    mark = tmp_path / "shown"
    app = subprocess.Popen(
        [sys.executable, "-m", "kvpilot.core.cli", "gui", "--fake-gpu", "rtx4090-desktop"],
        env={**env, "KVPILOT_SHOWN_MARK": str(mark)}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not mark.exists() and app.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert mark.exists(), "the window was not shown"
    finally:
        app.send_signal(signal.SIGTERM)
        _out, err = app.communicate(timeout=60)
    assert app.returncode == 0, err[-3000:]
    kept = sorted(logs.glob("kvpilot-crash-*.txt"))
    assert len(kept) == 1
    assert "Fatal Python error: Segmentation fault" in kept[0].read_text(encoding="utf-8")
    log_text = (logs / "kvpilot.log").read_text(encoding="utf-8")
    assert f"the last run crashed; its report: {kept[0]}" in log_text
    # this run ended well: its crash file is empty, nothing to offer at the start after it
    assert native_crash.crash_file(logs).read_text(encoding="utf-8") == ""


def test_the_offer_shows_the_crash_its_file_and_the_report(qtbot, tmp_path: Path) -> None:
    kept = tmp_path / "kvpilot-crash-20260101T000000Z.txt"
    text = ("Fatal Python error: Segmentation fault\n\nThread 0x1 (most recent call first):\n"
            "  File \"recommend.py\", line 228 in recommend\n")
    kept.write_text(text, encoding="utf-8")
    parent = QWidget()
    qtbot.addWidget(parent)
    box = crash.offer_previous(native_crash.NativeCrash(text=text, path=kept), parent)
    try:
        assert box.isVisible() and box.objectName() == "previousCrash"
        assert box.windowTitle() == "kvpilot ended unexpectedly last time"
        assert "Fatal Python error: Segmentation fault" in box.informativeText()
        assert str(kept) in box.informativeText()
        assert box.detailedText() == text
    finally:
        box.close()
