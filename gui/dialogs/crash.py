"""A bug in kvpilot is shown, not swallowed: unhandled exceptions (GUI thread or any other)
are written to kvpilot's log with their traceback and shown once in a dialog that names the log
file. The app keeps running; a server it supervises is left alone.

A crash below Python cannot be shown while it happens: :mod:`kvpilot.core.app.native_crash` has
faulthandler write it beside the log, and :func:`offer_previous` shows it at the next start."""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from pathlib import Path
from types import TracebackType

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import QMessageBox, QWidget

from kvpilot.core.app.native_crash import NativeCrash

log = logging.getLogger("kvpilot.gui.dialogs.crash")

#: at most one dialog in this many seconds (a failing timer must not open a dialog storm)
DIALOG_INTERVAL_S = 10.0


class CrashReporter(QObject):
    """Receives crashes from any thread (queued signal) and shows them in the GUI thread."""

    crashed = Signal(str)

    def __init__(self, log_path: Path | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.log_path = log_path
        self.parent_widget = parent
        self.dialog: QMessageBox | None = None
        self._last_shown = -DIALOG_INTERVAL_S
        self.crashed.connect(self._show)

    def report(
        self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None,
        where: str = "",
    ) -> None:
        """Log the exception with its traceback and ask the GUI thread to show it."""
        log.critical("unhandled error%s", f" in {where}" if where else "",
                     exc_info=(exc_type, exc, tb))
        summary = "".join(traceback.format_exception_only(exc_type, exc)).strip()
        self.crashed.emit(summary)

    @Slot(str)
    def _show(self, summary: str) -> None:
        now = time.monotonic()
        if now - self._last_shown < DIALOG_INTERVAL_S:
            return
        self._last_shown = now
        where = f"The details are in {self.log_path}." if self.log_path else (
            "kvpilot could not write its log file; the details were printed on stderr.")
        box = QMessageBox(self.parent_widget)
        box.setIcon(QMessageBox.Icon.Critical)
        box.setWindowTitle("kvpilot hit an unexpected error")
        box.setText("Something in kvpilot failed that should not have.")
        box.setInformativeText(
            f"{summary}\n\nThe app keeps running and a server it started is left as it is. "
            f"{where} Please include that file when you report this."
        )
        box.setStandardButtons(QMessageBox.StandardButton.Close)
        box.setModal(False)
        self.dialog = box
        box.show()


def install(reporter: CrashReporter) -> None:
    """Route ``sys.excepthook`` and ``threading.excepthook`` to ``reporter``."""
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException,
             tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            previous(exc_type, exc, tb)
            return
        reporter.report(exc_type, exc, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is None or issubclass(args.exc_type, SystemExit):
            return
        name = args.thread.name if args.thread is not None else "a thread"
        reporter.report(args.exc_type, args.exc_value, args.exc_traceback, where=name)

    sys.excepthook = hook
    threading.excepthook = thread_hook


def offer_previous(crash: NativeCrash, parent: QWidget | None) -> QMessageBox:
    """Show (not modal) that the last run crashed: its headline, where the report is kept, and
    the report itself under "Show Details"; returns the dialog."""
    box = QMessageBox(parent)
    box.setObjectName("previousCrash")
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("kvpilot ended unexpectedly last time")
    box.setText("kvpilot crashed the last time it ran.")
    box.setInformativeText(
        f"{crash.headline}\n\nThe report is kept in {crash.path}. Please include that file "
        f"when you report this; a server that run started was left running if it still is."
    )
    box.setDetailedText(crash.text)
    box.setStandardButtons(QMessageBox.StandardButton.Close)
    box.setModal(False)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.show()
    return box
