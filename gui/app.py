"""The composition root: QApplication set-up, services, the main window, clean shutdown.

``run(argv)`` parses the ``kvpilot gui`` options and returns the exit status; ``main(args)`` is
what ``kvpilot gui`` calls. Quitting (window closed, Ctrl+C, SIGTERM) always passes through
``AppServices.shutdown``, which stops a server this session started, so no vLLM process is left
behind.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer
from PySide6.QtWidgets import QApplication, QWidget

import kvpilot.gui  # noqa: F401 - sets PYQTGRAPH_QT_LIB before pyqtgraph is imported
from kvpilot.core.app import logsetup, native_crash, startup_gc
from kvpilot.core.app import settings as st
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.gui import theme, threadcheck
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.collector import GuiCollector
from kvpilot.gui.dialogs import crash
from kvpilot.gui.first_paint import FirstPaint
from kvpilot.gui.main_window import MainWindow
from kvpilot.gui.services import AppServices
from kvpilot.gui.workers import drain, wait_for_pool

log = logging.getLogger("kvpilot.gui")

#: when set, one line is written to this file at the main window's first paint: the wall-clock
#: time (``time.time()``, seconds) and the CPU seconds this process had used by then
#: (``time.process_time()``, all its threads); how benchmarks/packaging_footprint.py times
#: "start to first window"
SHOWN_MARK_ENV = "KVPILOT_SHOWN_MARK"
#: the same for the first paint of the planner's table with ranked plans in it: how the
#: benchmark times "start to ranked plans on screen"
RANKED_MARK_ENV = "KVPILOT_RANKED_MARK"
#: the cyclic collector held off by ``kvpilot gui`` comes back at the first paint, or this late
SETTLE_GC_LATEST_MS = 10_000


def _mark(env: str, said: str) -> None:
    """Log ``said`` (and write the moment to the file ``$env`` names, see
    :data:`SHOWN_MARK_ENV`)."""
    now, cpu_s = time.time(), time.process_time()
    path = os.environ.get(env)
    if path:
        try:
            Path(path).write_text(f"{now:.6f} {cpu_s:.6f}\n", encoding="utf-8")
        except OSError as exc:
            log.warning("cannot write %s=%s: %s", env, path, exc.strerror or exc)
    log.info("%s", said)


def _mark_ranked_on_screen(window: MainWindow) -> None:
    """Mark (:data:`RANKED_MARK_ENV`) the first paint of the planner's table once it holds
    ranked plans."""
    planner = window.planner
    FirstPaint(window, lambda: _mark(RANKED_MARK_ENV, "ranked plans shown"),
               only=planner.table.viewport(), when=lambda: bool(planner.rows))


def _shown() -> None:
    """The window's first paint: mark it, then let the collector run again (start-up objects
    frozen, :mod:`kvpilot.core.app.startup_gc`)."""
    _mark(SHOWN_MARK_ENV, "window shown")
    startup_gc.settle_after_start()


def ensure_app(argv: Sequence[str] | None = None) -> QApplication:
    """The QApplication (created once, reused by tests)."""
    threadcheck.install()
    app = QApplication.instance()
    if isinstance(app, QApplication):
        return app
    app = QApplication(list(argv or [sys.argv[0]]))
    app.setApplicationName("kvpilot")
    app.setOrganizationName("kvpilot")
    app.setDesktopFileName("kvpilot")
    return app


def build_window(
    *,
    fake_gpu: str | None = None,
    store: st.SettingsStore | None = None,
    services: AppServices | None = None,
    confirm_stop: Callable[[], bool] | None = None,
) -> MainWindow:
    """Create services and the main window (the QApplication must exist)."""
    store = store or st.SettingsStore()
    load = store.load()
    app = QApplication.instance()
    if isinstance(app, QApplication):
        theme.apply_theme(app, load.settings.active.theme)
    if services is None:
        services = AppServices(CoreBridge(), fake_gpu=fake_gpu)
    window = MainWindow(services, store, load, confirm_stop=confirm_stop)
    if isinstance(app, QApplication):
        app.aboutToQuit.connect(services.shutdown)
    return window


def _install_signal_handlers(app: QApplication) -> QTimer:
    """Ctrl+C / SIGTERM quit through Qt (so aboutToQuit stops the server)."""

    def quit_(*_: object) -> None:
        # the window saves and stops as when closed, and is hidden; then the loop ends. Not
        # quit(): it closes each top-level QWindow, which destroys its native window, and an
        # update still posted for the main window then flushed into nothing ("QBackingStore::
        # flush() called for QWidgetWindow ... which does not have a handle"; an abort under
        # QT_FATAL_WARNINGS). A server this session started is stopped by aboutToQuit.
        for widget in app.topLevelWidgets():
            if isinstance(widget, MainWindow):
                widget.finish_for_quit()
            if widget.isVisible():
                widget.hide()
        app.exit(0)

    signal.signal(signal.SIGINT, quit_)
    signal.signal(signal.SIGTERM, quit_)
    # let the Python interpreter run (and see signals) regularly while Qt's loop waits
    timer = QTimer()
    timer.setObjectName("python-signal-pump")
    timer.start(250)
    timer.timeout.connect(lambda: None)
    return timer


def _open_profile(window: MainWindow, name: str | None) -> None:
    """``--profile NAME``: make that profile active (an unknown name is said, not fatal)."""
    if not name or name == window.settings.active_profile:
        return
    if name in window.settings.names:
        window.profile_control.switch_profile(name)
    else:
        window.statusBar().showMessage(f"no profile called {name!r}; opened "
                                       f"{window.settings.active_profile!r}", 15_000)


def main(args: argparse.Namespace) -> int:
    """Run the app with parsed ``kvpilot gui`` options; returns the exit status."""
    previous_crash = arm_crash_report(logsetup.log_path())
    services = AppServices(CoreBridge(), fake_gpu=args.fake_gpu)
    services.nvml_module()  # a bad --fake-gpu name is a one-line user error (KvpilotError)
    app = ensure_app()
    # Qt objects in reference cycles are freed on the GUI thread only (gui/collector.py)
    collector = GuiCollector(parent=app)
    collector.start()
    window = build_window(services=services)
    _open_profile(window, getattr(args, "profile", None))
    FirstPaint(window, _shown)
    _mark_ranked_on_screen(window)
    # a window that never paints (started hidden, a stuck compositor) must not keep the cyclic
    # collector off for good
    QTimer.singleShot(SETTLE_GC_LATEST_MS, startup_gc.settle_after_start)
    if args.screenshot:
        return screenshot(
            window, Path(args.screenshot), args.panel, args.screenshot_timeout, _failure_log(args),
            getattr(args, "screenshot_size", None) or (1400, 940),
        )
    show_panel(window, args.panel, _failure_log(args))
    crash.install(crash.CrashReporter(logsetup.log_path(), window))
    window.show()
    from kvpilot.gui.screen_fit import clamp_to_screen

    clamp_to_screen(window)  # now that the window manager's frame is known
    if previous_crash is not None:
        log.warning("the last run crashed; its report: %s", previous_crash.path)
        QTimer.singleShot(0, window, lambda: crash.offer_previous(previous_crash, window))
    _offer_desktop_entry_later(window)
    pump = _install_signal_handlers(app)
    try:
        status = int(app.exec())
    finally:
        pump.stop()
        window.services.shutdown()
        wait_for_pool(30_000)
        dispose(window)
        collector.timer.stop()
    if threadcheck.violations():
        print(f"kvpilot: {len(threadcheck.violations())} Qt object(s) used off their thread "
              f"(see above)", file=sys.stderr)
        return threadcheck.EXIT_WRONG_THREAD
    return status


def arm_crash_report(log_file: Path | None) -> native_crash.NativeCrash | None:
    """Take the report a crashed last run left beside ``log_file`` (None: it ended well), then
    make faulthandler write this run's native crash there (:mod:`kvpilot.core.app.native_crash`)."""
    log_dir = log_file.parent if log_file is not None else None
    previous = native_crash.take_previous(log_dir) if log_dir is not None else None
    native_crash.arm(log_dir)
    return previous


def _offer_desktop_entry_later(window: MainWindow) -> None:
    """First start of a frozen build: offer the application-menu entry once, after showing."""
    from kvpilot.gui.dialogs.desktop_offer import offer_desktop_entry

    def offer() -> None:
        said = offer_desktop_entry(window)
        if said:
            window.statusBar().showMessage(said, 10_000)

    QTimer.singleShot(1500, offer)


def dispose(window: MainWindow) -> None:
    """Delete the window's C++ objects now, while Python is fully alive.

    Leaving Qt widgets (notably pyqtgraph's) to the interpreter's final garbage collection can
    crash PySide6 at exit; deleting them explicitly first avoids that.
    """
    from shiboken6 import Shiboken

    window.dashboard.timer.stop()
    window.services.stop_loops()  # no more samples for widgets about to go
    drain(30_000)  # deliver every pending result (and those of the tasks they start) first
    if Shiboken.isValid(window):
        # off the screen first, its last repaints done: deleting a shown window (Ctrl+C,
        # SIGTERM) left an update for its destroyed native window ("QBackingStore::flush()
        # called for QWidgetWindow ... which does not have a handle")
        window.hide()
        QCoreApplication.processEvents()
        Shiboken.delete(window)
    QCoreApplication.processEvents()
    import gc

    gc.collect()


# ----------------------------------------------------------------------- panels & screenshots


def show_panel(window: MainWindow, panel: str, failure_log: Path | None = None) -> QWidget:
    """Bring ``panel`` to the front; returns the widget to capture."""
    if panel == "dashboard":
        window.tabs.setCurrentWidget(window.dashboard)
    elif panel == "log":
        window.tabs.setCurrentWidget(window.log_view)
    elif panel == "chat":
        window.tabs.setCurrentWidget(window.chat_panel)  # the profile's conversation loads
    else:
        window.tabs.setCurrentWidget(window.planner)
    if panel in ("fallback", "log") and failure_log is not None:
        show_recorded_failure(window, failure_log)
        if panel == "log":
            window.tabs.setCurrentWidget(window.log_view)
    if panel == "settings":
        dialog = window.profile_control.make_settings_dialog()
        dialog.show()
        return dialog
    return window


def loaded(window: MainWindow) -> bool:
    """True once the probe, the vLLM lookup and the first plans have arrived."""
    gpus, runtimes = window.gpu_control, window.runtime_control
    probed = gpus.probe_result is not None or gpus.target is not None
    runtime_known = runtimes.runtime is not None or (
        runtimes.runtime_problem is not None and not runtimes.runtime_problem.endswith("…")
    )
    planned = bool(window.planner.rows) or window.planner.status.text() not in ("", "planning…")
    return probed and runtime_known and planned


def wait_until(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Process events until ``predicate()`` or the timeout; True when it became true.

    Waits for the next event rather than sleeping between looks, so that a result a pool
    thread sends is handled as it arrives, as in the running app's event loop; a 20 ms timer
    wakes the wait when nothing else happens."""
    deadline = time.monotonic() + timeout_s
    wake = QTimer()
    wake.setObjectName("wait-until-wake")
    wake.start(20)
    try:
        while time.monotonic() < deadline:
            QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
            if predicate():
                return True
    finally:
        wake.stop()
    return predicate()


def _failure_log(args: argparse.Namespace) -> Path | None:
    value = getattr(args, "failure_log", None)
    return Path(value) if value else None


def screenshot(
    window: MainWindow,
    path: Path,
    panel: str,
    timeout_s: float = 60.0,
    failure_log: Path | None = None,
    size: tuple[int, int] = (1400, 940),
) -> int:
    """Load offscreen, show ``panel`` in a window of ``size`` (width, height; a laptop's
    1,366 x 768 shows what fits there), save a PNG of it to ``path``; 0 on success, 1 if
    not."""
    window.resize(*size)
    window.show()
    ok = wait_until(lambda: loaded(window), timeout_s)
    target = show_panel(window, panel, failure_log)
    wait_until(lambda: False, 1.0)  # chart, feasibility and redraw timers settle
    window.dashboard.redraw()
    QCoreApplication.processEvents()
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = target.grab().save(str(path), "PNG")
    if target is not window:
        target.close()
    window.close()
    wait_for_pool(30_000)
    window.services.shutdown()
    dispose(window)
    if not ok:
        print(f"kvpilot: the window did not finish loading in {timeout_s:g} s", file=sys.stderr)
    if not saved:
        print(f"kvpilot: could not write {path}", file=sys.stderr)
        return 1
    print(path)
    return 0 if ok else 1


def show_recorded_failure(window: MainWindow, log_path: Path) -> bool:
    """Feed a recorded vLLM failure log through the core log scanner into the banner.

    Used for ``--panel fallback`` (documentation screenshots): the failure is classified by
    :func:`kvpilot.core.app.watch.scan_log` (the scanner of a launch), and the fallback
    options come from the fit engine for the selected plan.

    Raises:
        WatchError: the log cannot be read.
    """
    from kvpilot.core.app.watch import scan_log
    from kvpilot.gui.services import LaunchRequest

    scanned = scan_log(log_path)
    window.log_view.append_many(list(scanned.lines))
    failure = scanned.failure  # the most specific failure of the whole log, as the supervisor's
    row = window.planner.selected()
    if failure is None or row is None or row.inputs is None:
        return False
    window.server_control.current_request = LaunchRequest(
        inputs=row.inputs, model=row.model_ref, profile=window.profile, predicted=row.capacity
    )
    window.server_panel.show_state(SupervisorState.FAILED, model=row.model_ref)
    window.fallback_control.on_failure(failure, after_ready=False)
    wait_until(lambda: not window.fallback_control.proposing, 10)
    return True
