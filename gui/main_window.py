"""The main window: GPU, planner, server, dashboard and log, wired to their controllers.

The window builds the widgets and connects their signals (and the core bridge's) to the
controllers of :mod:`kvpilot.gui.controllers`, which do the work: probes, planning, runtime
discovery, server start and stop run on the thread pool; samplers and the supervisor run in their
own core threads and report through :class:`~kvpilot.gui.bridge.CoreBridge` signals (queued onto
this thread). Widgets are only touched on the GUI thread. The window itself keeps its geometry
and closes cleanly: a server it started is stopped first (after asking).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import QByteArray, QTimer
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMessageBox

from kvpilot.core.app import settings as st
from kvpilot.gui.controllers.attach import AttachController
from kvpilot.gui.controllers.benchmark import BenchmarkController
from kvpilot.gui.controllers.chat import ChatController
from kvpilot.gui.controllers.fallback import FallbackController
from kvpilot.gui.controllers.gpus import GpuController
from kvpilot.gui.controllers.hub_search import HubSearchController
from kvpilot.gui.controllers.measure import MeasureController
from kvpilot.gui.controllers.orphans import OrphanController
from kvpilot.gui.controllers.planner import PlannerController
from kvpilot.gui.controllers.profiles import ProfileController
from kvpilot.gui.controllers.runtimes import RuntimeController
from kvpilot.gui.controllers.server import ServerController
from kvpilot.gui.first_paint import FirstPaint
from kvpilot.gui.panels.chat_panel import ChatPanel
from kvpilot.gui.services import AppServices
from kvpilot.gui.widgets.window_widgets import WindowWidgets


class MainWindow(WindowWidgets):
    """The kvpilot window.

    Args:
        services: the core adapters of this session.
        store: where settings are saved.
        load: the settings as loaded (with the warnings to show).
        confirm_stop: asked before closing stops a running server; returns True to stop and
            close. Tests pass ``lambda: True``; the default asks with a message box.

    The controllers are ``gpu_control``, ``runtime_control``, ``profile_control``,
    ``plan_control``, ``server_control``, ``fallback_control``, ``attach_control``,
    ``benchmark_control``, ``orphan_control`` and ``chat_control`` (the Chat tab); each gets
    the ones it asks, and is told of the others' events through the callbacks :meth:`_wire`
    sets.
    """

    def __init__(
        self,
        services: AppServices,
        store: st.SettingsStore,
        load: st.LoadResult,
        *,
        confirm_stop: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(services, store, load.settings)
        self.confirm_stop = confirm_stop or self._ask_stop
        self._closing = False

        runtimes = self.runtime_control = RuntimeController(self)
        gpus = self.gpu_control = GpuController(self, runtimes)
        profiles = self.profile_control = ProfileController(self, runtimes)
        self.plan_control = PlannerController(self, gpus, runtimes, profiles)
        self.measure_control = MeasureController(self, runtimes, self.plan_control)
        server = self.server_control = ServerController(self, gpus, runtimes)
        self.fallback_control = FallbackController(self, gpus, server)
        attach = self.attach_control = AttachController(self, gpus, server)
        self.benchmark_control = BenchmarkController(self, server, attach)
        self.orphan_control = OrphanController(self, server)
        self.hub_search_control = HubSearchController(self, gpus, runtimes)
        self.chat_panel = ChatPanel()
        self.tabs.insertTab(self.tabs.indexOf(self.log_view), self.chat_panel, "Chat")
        self.chat_control = ChatController(self, self.chat_panel, server, attach)
        self._add_runs_tab()
        self._add_front_tab()
        self._wire()
        self.chat_control.wire()

        profiles.apply_profile(initial=True)
        self._restore_geometry()
        profiles.show_load_warnings(load.warnings)
        self.server_panel.set_launch_blocked(runtimes.runtime_problem)
        # once the window is painted: the probe, the vLLM lookup and the planning they start
        # must not hold up the first paint (they share the GIL); from the event loop when the
        # window is not shown, and at the latest after a second (a window shown minimized)
        self._started = False
        self._first_paint = FirstPaint(self, self._start_once)
        QTimer.singleShot(0, self, lambda: None if self.isVisible() else self._start_once())
        QTimer.singleShot(1000, self, self._start_once)

    def _wire(self) -> None:
        """Every signal of the widgets and the core bridge to the controller that handles it,
        and the controllers' callbacks to each other (lambdas where a signal's argument is not
        the slot's)."""
        gpus, runtimes, profiles = self.gpu_control, self.runtime_control, self.profile_control
        plans, server, fallback = self.plan_control, self.server_control, self.fallback_control
        attach, orphans = self.attach_control, self.orphan_control
        measure = self.measure_control

        # what one controller's events ask of another
        gpus.target_changed = plans.replan
        def runtime_changed() -> None:  # the launch line and the plans speak of its release
            gpus.on_runtime_changed()
            plans.replan()

        runtimes.runtime_changed = runtime_changed
        runtimes.runtime_removed = profiles.on_runtime_removed
        profiles.goal_restored = plans.replan
        server.launching = fallback.reset
        server.failed = fallback.on_failure

        self.profile_combo.activated.connect(profiles.on_profile_combo)
        self.settings_button.clicked.connect(lambda: profiles.open_settings())
        self.settings_action.triggered.connect(lambda: profiles.open_settings())
        self.notice_close.clicked.connect(profiles.hide_notice)

        self.gpu_combo.activated.connect(gpus.on_gpu_combo)
        self.gpu_panel.planner_gpu_changed.connect(gpus.on_planner_gpu)

        self.planner.goal_changed.connect(plans.on_goal_changed)
        self.planner.plan_selected.connect(plans.on_plan_selected)
        self.planner.copy_command_requested.connect(plans.copy_command)
        self.planner.export_requested.connect(plans.export_plan)
        self.planner.browse_model_requested.connect(plans.browse_model)
        self.planner.hub_search_requested.connect(lambda: self.hub_search_control.open())
        self.planner.launch_requested.connect(server.launch_plan)
        self.planner.measure_requested.connect(measure.measure)
        self.planner.measure_cancel_requested.connect(measure.cancel)

        self.launch_action.triggered.connect(lambda: server.launch_selected())
        self.stop_action.triggered.connect(lambda: server.stop_server())
        self.server_panel.launch_clicked.connect(server.launch_selected)
        self.server_panel.stop_clicked.connect(lambda: server.stop_server())
        self.server_panel.attach_clicked.connect(lambda: attach.open_attach())
        self.server_panel.detach_clicked.connect(attach.detach)
        self.server_panel.install_clicked.connect(lambda: runtimes.open_install())
        self.dashboard.benchmark_requested.connect(lambda: self.benchmark_control.open())

        self.banner.option_chosen.connect(fallback.apply_fallback)
        self.banner.details_requested.connect(lambda: self.tabs.setCurrentWidget(self.log_view))
        self.dashboard.fix_requested.connect(fallback.apply_pressure_fix)

        self.orphan_adopt.clicked.connect(lambda: orphans.adopt_orphan())
        self.orphan_stop.clicked.connect(lambda: orphans.stop_orphan())

        b = self.services.bridge
        b.gpu_sample.connect(gpus.on_gpu_sample)
        b.server_event.connect(server.on_server_event)
        b.download_progress.connect(server.on_download_progress)
        b.measure_phase.connect(measure.on_phase)
        b.message.connect(lambda _level, text: self.say(text, 10_000))

    def _add_runs_tab(self) -> None:
        """The Runs tab: every server run kept, compared side by side, relaunched."""
        from kvpilot.gui.controllers.runs import RunsController
        from kvpilot.gui.panels.runs_view import RunsView

        self.runs_view = RunsView()
        self.tabs.addTab(self.runs_view, "Runs")
        runs = self.runs_control = RunsController(
            self, self.runs_view, self.server_control, self.gpu_control, self.runtime_control)
        self.runs_view.refresh_requested.connect(runs.refresh)
        self.runs_view.relaunch_requested.connect(runs.relaunch)
        self.services.bridge.server_event.connect(runs.on_server_event)
        self.tabs.currentChanged.connect(
            lambda _i: runs.refresh() if self.tabs.currentWidget() is self.runs_view else None)

    def _add_front_tab(self) -> None:
        """The Front tab: several profiles behind one address."""
        from kvpilot.gui.controllers.front import FrontController
        from kvpilot.gui.panels.front_panel import FrontPanel

        self.front_panel = FrontPanel()
        self.tabs.addTab(self.front_panel, "Front")
        self.front_control = FrontController(self, self.front_panel)

    # =================================================================== start-up

    def _start_once(self) -> None:
        # a window closed before its deferred start (a quick quit, a test) starts nothing: the
        # samplers it would start have no window left to feed
        if not self._started and not self._closing:
            self._started = True
            self.start()

    def start(self) -> None:
        """Kick off the background work: kvpilot's own folders checked (one that cannot be
        written is said in the banner), GPU probe, vLLM discovery, orphaned servers, and giving
        freed memory back to the system once a minute."""
        from kvpilot.core.base.paths import folder_problems
        from kvpilot.gui.workers import run_in_pool

        run_in_pool(folder_problems, self.server_control.show_folder_problems, _ignore, owner=self)
        self.gpu_control.probe()
        # the catalog read beside the probe: the first plans, asked for once it is back, only
        # plan (queued before the vLLM lookup, which the first plans do not wait for)
        run_in_pool(self.services.warm_planner, lambda _: None, _warm_failed)
        self.runtime_control.discover()
        self.orphan_control.find()
        self.services.start_heap_releaser()

    # =================================================================== window

    def _restore_geometry(self) -> None:
        from kvpilot.gui.screen_fit import clamp_to_screen

        geo = self.settings.window_geometry
        if geo:
            try:
                self.restoreGeometry(QByteArray(base64.b64decode(geo)))
                clamp_to_screen(self)  # saved on a larger screen
                return
            except (ValueError, TypeError):
                pass
        self.resize(1360, 900)
        clamp_to_screen(self)  # a 1366 x 768 laptop

    def geometry_text(self) -> str:
        return base64.b64encode(bytes(self.saveGeometry().data())).decode("ascii")

    def _ask_stop(self) -> bool:
        answer = QMessageBox.question(
            self,
            "Stop the server?",
            "The vLLM server started by kvpilot is still running. Stop it and quit?",
            QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
            QMessageBox.StandardButton.Yes,
        )
        return answer == QMessageBox.StandardButton.Yes

    def closeEvent(self, event: QCloseEvent) -> None:
        if self._closing:
            event.accept()
            return
        if self.services.server_running() and self.server_control.started_by_us:
            if not self.confirm_stop():
                event.ignore()
                return
            event.ignore()
            self.statusBar().showMessage("stopping the server before quitting…")
            self.setEnabled(False)
            self.server_control.stop_server(then=self._finish_close)
            return
        self._finish_close()
        event.accept()

    def finish_for_quit(self) -> None:
        """What closing does (save the goal and geometry, stop the loops), without closing:
        for a quit by Ctrl+C or SIGTERM, which asks nothing."""
        self._closing = True
        self._finish_close()

    def _finish_close(self) -> None:
        self.planner._debounce.stop()
        self.profile_control.remember_goal(self.planner.request())  # an edit just before closing
        self.settings = replace(self.settings, window_geometry=self.geometry_text())
        self.profile_control.save()
        self.dashboard.timer.stop()
        self.server_control.log_timer.stop()
        self.measure_control.cancel()  # a dry run's thread stops its server
        self.chat_control.shutdown()  # a reply streaming stops; the conversation is written
        self.front_control.shutdown()  # the front and every server it started stop
        self.services.stop_loops()
        if not self._closing:
            self._closing = True
            if self.isVisible():
                self.close()


def _warm_failed(exc: BaseException) -> None:
    """Reading the catalog ahead failed unexpectedly: logged; the planning says it again."""
    logging.getLogger("kvpilot.gui").warning("reading the catalog ahead failed: %s", exc)


def _ignore(exc: BaseException) -> None:
    """A folder check that failed unexpectedly: logged; a launch says it again if it matters."""
    logging.getLogger("kvpilot.gui").warning("checking kvpilot's folders failed: %s", exc)
