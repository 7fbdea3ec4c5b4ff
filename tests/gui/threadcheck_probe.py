"""Run by test_threadcheck.py in a process of its own: a dialog held in a reference cycle (its
slot refers back to it, as the settings dialog's do) becomes garbage, and a cyclic collection
frees it on a worker thread, as Python's automatic collector did on a planning thread.

``python threadcheck_probe.py automatic``: the collection runs on the worker thread;
``python threadcheck_probe.py gui-collector``: the window's collector owns collection (the
worker's allocations trip no collection there; the GUI thread frees the dialog).

Prints one line per thread-check violation, then ``freed on <thread name>`` (the thread that
freed the dialog's wrapper) and exits at once (a dialog freed on a wrong thread leaves Qt's
timers dangling; the event loop is not run again).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref
from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtWidgets import QApplication, QDialog, QLineEdit, QWidget

from kvpilot.core.app import startup_gc
from kvpilot.gui import threadcheck
from kvpilot.gui.collector import GuiCollector


class Section(QWidget):
    """A part of the dialog that asks the dialog for something (as AutostartSection does)."""

    def __init__(self, current: Callable[[], str], parent: QWidget) -> None:
        super().__init__(parent)
        self.current = current


class Dialog(QDialog):
    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.edit = QLineEdit(self)
        self.section = Section(lambda: self.objectName(), self)  # dialog -> section -> dialog
        self.debounce = QTimer(self)  # a timer that runs while the dialog lives
        self.debounce.start(60_000)


def main(mode: str) -> int:
    os.environ[threadcheck.ENV_VAR] = "1"
    threadcheck.install()
    app = QApplication([])  # noqa: F841 - kept alive for the whole probe
    window = QWidget()
    window.show()
    collector = GuiCollector(interval_ms=10)
    if mode == "gui-collector":
        collector.start()
    else:
        startup_gc.collect_automatically()
    freed_on: list[str] = []
    dialog = Dialog(window)
    dialog.edit.setFocus()
    dialog.edit.setText("x")  # the cursor's blink timer runs
    QTimer.singleShot(100, dialog.accept)
    dialog.exec()  # afterwards its Python side owns it, as the settings dialog's did
    weakref.finalize(dialog, lambda: freed_on.append(threading.current_thread().name))
    del dialog  # held by its own cycle only now

    def plan() -> None:  # allocates as planning does; the threshold trips on this thread
        junk = []
        for i in range(20_000):
            a: list[object] = [i]
            a.append(a)
            junk.append(a)
        if mode == "automatic":
            gc.collect()  # what the automatic collector would run here anyway

    worker = threading.Thread(target=plan, name="planning-worker")
    worker.start()
    worker.join()
    if mode == "gui-collector":
        for _ in range(50):
            if freed_on:
                break
            QCoreApplication.processEvents()
            threading.Event().wait(0.02)
            collector.collect_due()
    for v in threadcheck.violations():
        print("VIOLATION " + v.splitlines()[0], flush=True)
    print(f"freed on {freed_on[0] if freed_on else 'nothing'}", flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
