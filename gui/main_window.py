"""The main window: GPU, planner, server, dashboard and log, wired to :class:`AppServices`.

Everything slow happens elsewhere: probes, planning, runtime discovery, server start and stop run
on the thread pool; samplers and the supervisor run in their own core threads and report through
:class:`~kvpilot.gui.bridge.CoreBridge` signals (queued onto this thread). Widgets are only
touched here, on the GUI thread.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QByteArray, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core import settings as st
from kvpilot.core.errors import KvpilotError
from kvpilot.core.fit.startup import StartupRefusedError
from kvpilot.core.hardware.selection import describe_gpu, preferred_gpu
from kvpilot.core.vllm import logparse
from kvpilot.core.vllm import supervisor as sv
from kvpilot.core.vllm.loglevel import line_level
from kvpilot.gui import theme
from kvpilot.gui.attach_dialog import AttachDialog
from kvpilot.gui.benchmark_dialog import BenchmarkDialog
from kvpilot.gui.fallback import FallbackBanner, FallbackChoice
from kvpilot.gui.panels.dashboard_panel import DashboardPanel
from kvpilot.gui.panels.gpu_panel import GpuPanel
from kvpilot.gui.panels.planner_panel import CHART_CONTEXTS, PlannerPanel
from kvpilot.gui.panels.server_panel import ATTACHED, LogView, ServerPanel
from kvpilot.gui.records import Goal, GpuTarget, PlanResult, PlanRow
from kvpilot.gui.services import AppServices, LaunchRequest
from kvpilot.gui.settings_dialog import SettingsDialog
from kvpilot.gui.workers import run_in_pool, run_in_thread

if TYPE_CHECKING:
    from kvpilot.core.fit.fallback import FallbackOption

log = logging.getLogger("kvpilot.gui")

DEFAULT_PLANNER_GPU = "NVIDIA GeForce RTX 4090"
#: how often the server log view takes the new output lines (ms)
LOG_DRAIN_MS = 100
SHORTCUT_LAUNCH = "F5"
SHORTCUT_STOP = "Shift+F5"
SHORTCUT_SETTINGS = "Ctrl+,"


class MainWindow(QMainWindow):
    """The kvpilot window.

    Args:
        services: the core adapters of this session.
        store: where settings are saved.
        load: the settings as loaded (with the warnings to show).
        confirm_stop: asked before closing stops a running server; returns True to stop and
            close. Tests pass ``lambda: True``; the default asks with a message box.
    """

    def __init__(
        self,
        services: AppServices,
        store: st.SettingsStore,
        load: st.LoadResult,
        *,
        confirm_stop: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("kvpilot")
        self.services = services
        self.store = store
        self.settings = load.settings
        self.confirm_stop = confirm_stop or self._ask_stop
        self.target: GpuTarget | None = None
        #: this machine's GPUs in use (NVML indices; empty in planner mode)
        self.gpu_indices: tuple[int, ...] = ()
        self.probe_result: Any | None = None
        self.runtime: Any | None = None
        self.runtime_problem: str | None = "looking for vLLM…"
        self.current_request: LaunchRequest | None = None
        self.last_failure: Any | None = None
        self.fallback_options: list[FallbackOption] = []
        self.plan_generation = 0
        self.started_by_us = False
        self._closing = False
        self._stop_in_flight = False
        self._predicted: Any | None = None
        self._reported: Any | None = None
        #: the server being watched but not owned (a WatchSample's identity), or None
        self.attached: Any | None = None
        self._attached_key: str | None = None

        # --- widgets
        self.profile_combo = QComboBox()
        self.profile_combo.setObjectName("profileCombo")
        self.profile_combo.setMinimumWidth(160)
        self.profile_combo.activated.connect(self._on_profile_combo)
        self.gpu_combo = QComboBox()
        self.gpu_combo.setObjectName("gpuCombo")
        self.gpu_combo.setToolTip("The GPU(s) to plan for, launch on and watch")
        self.gpu_combo.setVisible(False)
        self.gpu_combo.activated.connect(self._on_gpu_combo)
        self.gpu_combo_label = QLabel("GPU:")
        self.gpu_combo_label.setVisible(False)
        self.settings_button = QPushButton("⚙ Settings")
        self.settings_button.setObjectName("settingsButton")
        self.settings_button.setToolTip(f"Profiles, vLLM, host, port, keys ({SHORTCUT_SETTINGS})")
        self.settings_button.clicked.connect(lambda: self.open_settings())
        self.notice = QLabel()
        self.notice.setObjectName("settingsNotice")
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self.notice.setStyleSheet(
            f"background: #fff6df; border: 1px solid {theme.TIGHT}; padding: 4px; color: #202020"
        )
        self.notice_close = QToolButton()
        self.notice_close.setText("✕")
        self.notice_close.setVisible(False)
        self.notice_close.clicked.connect(self._hide_notice)

        self.orphan_bar = QWidget()
        self.orphan_bar.setObjectName("orphanBar")
        self.orphan_label = QLabel()
        self.orphan_label.setWordWrap(True)
        self.orphan_adopt = QPushButton("Keep it and watch it")
        self.orphan_stop = QPushButton("Stop it")
        ob = QHBoxLayout(self.orphan_bar)
        ob.setContentsMargins(6, 2, 6, 2)
        ob.addWidget(self.orphan_label, 1)
        ob.addWidget(self.orphan_adopt)
        ob.addWidget(self.orphan_stop)
        self.orphan_bar.setStyleSheet(f"#orphanBar {{ border: 1px solid {theme.TIGHT}; }}")
        self.orphan_bar.setVisible(False)
        self.orphan_adopt.clicked.connect(lambda: self.adopt_orphan())
        self.orphan_stop.clicked.connect(lambda: self.stop_orphan())
        self.orphans: list[Any] = []

        self.gpu_panel = GpuPanel()
        self.banner = FallbackBanner()
        self.server_panel = ServerPanel()
        self.planner = PlannerPanel()
        self.dashboard = DashboardPanel(services.telemetry)
        self.log_view = LogView()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.addTab(self.planner, "Plan")
        self.tabs.addTab(self.dashboard, "Dashboard")
        self.tabs.addTab(self.log_view, "Log")

        header = QHBoxLayout()
        header.addWidget(QLabel("<b>kvpilot</b> · profile:"))
        header.addWidget(self.profile_combo)
        header.addWidget(self.gpu_combo_label)
        header.addWidget(self.gpu_combo)
        header.addStretch(1)
        header.addWidget(self.settings_button)
        notice_row = QHBoxLayout()
        notice_row.addWidget(self.notice, 1)
        notice_row.addWidget(self.notice_close, 0, Qt.AlignmentFlag.AlignTop)

        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.setSpacing(4)
        lay.addLayout(header)
        lay.addLayout(notice_row)
        lay.addWidget(self.gpu_panel)
        lay.addWidget(self.orphan_bar)
        lay.addWidget(self.banner)
        lay.addWidget(self.server_panel)
        lay.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.statusBar().showMessage("probing the GPU…")

        # --- actions and shortcuts
        self.launch_action = QAction("Launch", self)
        self.launch_action.setShortcut(QKeySequence(SHORTCUT_LAUNCH))
        self.launch_action.triggered.connect(lambda: self.launch_selected())
        self.stop_action = QAction("Stop", self)
        self.stop_action.setShortcut(QKeySequence(SHORTCUT_STOP))
        self.stop_action.triggered.connect(lambda: self.stop_server())
        self.settings_action = QAction("Settings", self)
        self.settings_action.setShortcut(QKeySequence(SHORTCUT_SETTINGS))
        self.settings_action.triggered.connect(lambda: self.open_settings())
        for a in (self.launch_action, self.stop_action, self.settings_action):
            a.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
            self.addAction(a)
        self.server_panel.launch_button.setToolTip(f"Launch the selected plan ({SHORTCUT_LAUNCH})")
        self.server_panel.stop_button.setToolTip(f"Stop the server ({SHORTCUT_STOP})")

        # --- wiring
        b = services.bridge
        b.gpu_sample.connect(self._on_gpu_sample)
        b.server_event.connect(self._on_server_event)
        # vLLM's output lines arrive in batches, never one event per line (a flood stays cheap)
        self._log_timer = QTimer(self)
        self._log_timer.setInterval(LOG_DRAIN_MS)
        self._log_timer.timeout.connect(self.drain_log)
        self._log_timer.start()
        b.download_progress.connect(self._on_download_progress)
        b.message.connect(lambda level, text: self.statusBar().showMessage(text, 10_000))
        self.gpu_panel.planner_gpu_changed.connect(self._on_planner_gpu)
        self.planner.goal_changed.connect(self._on_goal_changed)
        self.planner.plan_selected.connect(self._on_plan_selected)
        self.planner.launch_requested.connect(self.launch_plan)
        self.planner.copy_command_requested.connect(self.copy_command)
        self.planner.export_requested.connect(self.export_plan)
        self.planner.browse_model_requested.connect(self._browse_model)
        self.server_panel.launch_clicked.connect(self.launch_selected)
        self.server_panel.stop_clicked.connect(lambda: self.stop_server())
        self.server_panel.attach_clicked.connect(lambda: self.open_attach())
        self.server_panel.detach_clicked.connect(lambda: self.detach())
        self.server_panel.install_clicked.connect(lambda: self.open_runtime_install())
        self.banner.option_chosen.connect(self.apply_fallback)
        self.banner.details_requested.connect(lambda: self.tabs.setCurrentWidget(self.log_view))
        self.dashboard.fix_requested.connect(self.apply_pressure_fix)
        self.dashboard.benchmark_requested.connect(lambda: self.open_benchmark())

        self._names_refresh = QTimer(self)
        self._names_refresh.setObjectName("gpu-process-names")
        self._names_refresh.setInterval(5000)
        self._names_refresh.timeout.connect(self._refresh_names)
        self._probe_in_flight = False

        self._apply_profile(initial=True)
        self._restore_geometry()
        self._show_load_warnings(load.warnings)
        self.server_panel.set_launch_blocked(self.runtime_problem)
        # from the event loop, i.e. once the window is shown: the probe, the vLLM lookup and
        # the planning they start must not hold up the first paint (they share the GIL)
        QTimer.singleShot(0, self, self.start)

    # =================================================================== start-up

    def start(self) -> None:
        """Kick off the background work: GPU probe and vLLM discovery."""
        self._probe_in_flight = True
        run_in_pool(self.services.probe, self._on_probe, self._on_probe_error)
        self._discover_runtime()
        run_in_pool(self.services.find_orphans, self._on_orphans)

    # ----------------------------------------------------------------- orphaned servers

    def _on_orphans(self, orphans: list[Any]) -> None:
        self.orphans = list(orphans)
        if not self.orphans:
            self.orphan_bar.setVisible(False)
            return
        o = self.orphans[0]
        rec = o.record
        more = f" (and {len(self.orphans) - 1} more)" if len(self.orphans) > 1 else ""
        self.orphan_label.setText(
            f"A vLLM server started by an earlier kvpilot is still running: {rec.model} on "
            f"{rec.base_url}, {len(o.pids)} process(es){more}. It holds GPU memory."
        )
        self.orphan_adopt.setEnabled(o.leader_alive and not self.services.server_running())
        self.orphan_bar.setVisible(True)

    def stop_orphan(self) -> bool:
        """Stop the first orphaned server in the background (its whole process group)."""
        if not self.orphans:
            return False
        orphan = self.orphans[0]
        self.orphan_stop.setEnabled(False)
        self.orphan_label.setText(f"stopping the server on {orphan.record.base_url}…")

        def done(report: Any) -> None:
            self.orphan_stop.setEnabled(True)
            self.statusBar().showMessage(
                f"stopped the earlier server on port {orphan.record.port}", 10_000
            )
            run_in_pool(self.services.find_orphans, self._on_orphans)

        run_in_pool(lambda: self.services.stop_orphan(orphan), done, lambda exc: done(None))
        return True

    def adopt_orphan(self) -> bool:
        """Watch the first orphaned server as if this window had started it."""
        if not self.orphans or self.services.server_running():
            return False
        orphan = self.orphans.pop(0)
        self.log_view.clear()
        self.started_by_us = True  # its pidfile is ours now: closing asks and stops it
        self.current_request = None
        self.services.adopt_orphan(orphan)
        self.server_panel.show_state("starting", model=orphan.record.model)
        self._on_orphans(self.orphans)
        return True

    def _discover_runtime(self) -> None:
        configured = self.profile.vllm_runtime
        self.runtime_problem = "looking for vLLM…"
        self.server_panel.set_launch_blocked(self.runtime_problem)
        run_in_pool(
            lambda: self.services.discover_runtime(configured),
            self._on_runtime,
            self._on_runtime_error,
        )

    def _on_runtime(self, runtime: Any) -> None:
        self.set_runtime(runtime)

    def set_runtime(self, runtime: Any) -> None:
        """Use ``runtime`` (a VllmRuntime) for launches, enable Launch and re-plan for it."""
        self.runtime = runtime
        self.runtime_problem = None
        self.server_panel.set_launch_blocked(None)
        self.statusBar().showMessage(
            f"vLLM {runtime.version} at {_home_relative(runtime.location)}", 10_000
        )
        self.replan()  # the fit engine's rules depend on the vLLM version

    def _on_runtime_error(self, exc: BaseException) -> None:
        self.runtime = None
        message = exc.message if isinstance(exc, KvpilotError) else str(exc)
        self.runtime_problem = f"vLLM is not installed or not usable: {message}"
        self.server_panel.set_launch_blocked(self.runtime_problem, offer_install=True)

    def _make_install_dialog(self, parent: Any = None) -> Any:
        from kvpilot.gui.runtime_install import InstallRuntimeDialog

        dialog = InstallRuntimeDialog(
            parent or self,
            data_dir=self.services.data_dir,
            nvml_module=self.services.nvml_module(),
            factory=self.services.runtime_installer_factory(),
            profiles=lambda: self.settings.profiles,
        )
        dialog.installed.connect(lambda _rt: self._discover_runtime())
        dialog.default_changed.connect(lambda _id: self._discover_runtime())
        dialog.removed.connect(self._on_runtime_removed)
        return dialog

    def _on_runtime_removed(self, _runtime_id: str, pinned_by: list[str]) -> None:
        """Profiles that pinned a removed runtime go back to auto-detect; then rediscover."""
        for name in pinned_by:
            try:
                self.settings = st.update_profile(
                    self.settings, replace(self.settings.profile(name), vllm_runtime="")
                )
            except KvpilotError:
                continue  # the profile was renamed or deleted meanwhile
        if pinned_by:
            self._save()
            self._apply_profile()
        self._discover_runtime()

    def open_runtime_install(self, *, modal: bool = True) -> Any:
        """The "Install vLLM" dialog (core/runtimes in a worker thread); a verified install
        is picked up by discovery at once."""
        dialog = self._make_install_dialog()
        if modal:
            dialog.exec()
        else:
            dialog.show()
        return dialog

    def _on_probe(self, result: Any) -> None:
        self._probe_in_flight = False
        first = self.probe_result is None
        self.probe_result = result
        gpus = [g for g in result.gpus if not g.lost] if result.ok else []
        if not gpus:
            if first:
                self._enter_planner_mode(result)
            return
        if first:
            self._fill_gpu_combo(gpus)
            chosen = preferred_gpu(gpus) or gpus[0]
            self.gpu_indices = (chosen.index,)
        by_index = {g.index: g for g in gpus}
        gpu = by_index.get(self.gpu_indices[0], gpus[0])
        self.gpu_panel.show_probe(result, gpu)
        text, warn = self.services.startup_limit(gpu)
        self.gpu_panel.set_startup_limit(text, warn)
        if first:
            self.select_gpus(self.gpu_indices)
            self._names_refresh.start()
            self.statusBar().showMessage(f"{gpu.name}: ready to plan", 5000)

    def _fill_gpu_combo(self, gpus: list[Any]) -> None:
        """Every GPU NVML reports, plus all of them together when there are several."""
        self.gpu_combo.blockSignals(True)
        self.gpu_combo.clear()
        for g in gpus:
            self.gpu_combo.addItem(describe_gpu(g), (g.index,))
        if len(gpus) > 1:
            indices = tuple(g.index for g in gpus)
            names = "+".join(str(i) for i in indices)
            self.gpu_combo.addItem(f"{names}: all {len(gpus)} (tensor parallel)", indices)
        self.gpu_combo.blockSignals(False)
        several = len(gpus) > 1
        self.gpu_combo.setVisible(several)
        self.gpu_combo_label.setVisible(several)

    def _on_gpu_combo(self, index: int) -> None:
        indices = self.gpu_combo.itemData(index)
        if indices and tuple(indices) != self.gpu_indices:
            self.select_gpus(tuple(indices))

    def select_gpus(self, indices: tuple[int, ...]) -> bool:
        """Plan for, launch on and sample exactly this machine's GPUs ``indices``.

        False (with the reason shown) while a server runs or for a GPU NVML does not report.
        """
        result = self.probe_result
        if result is None or not getattr(result, "ok", False):
            return False
        if self.services.server_running() and indices != self.gpu_indices:
            self.statusBar().showMessage("stop the server before switching GPUs", 8000)
            self._sync_gpu_combo()
            return False
        try:
            target = self.services.target_from_selection(result, indices)
        except KvpilotError as exc:
            self.statusBar().showMessage(exc.message, 10_000)
            self._sync_gpu_combo()
            return False
        self.gpu_indices = indices
        self.target = target
        self._sync_gpu_combo()
        by_index = {g.index: g for g in result.gpus}
        first = by_index[indices[0]]
        self.gpu_panel.show_probe(result, first)
        text, warn = self.services.startup_limit(first)
        self.gpu_panel.set_startup_limit(text, warn)
        self.services.start_gpu_sampler(
            indices if len(indices) > 1 else indices[0], self.profile.sampling_hz
        )
        self.replan()
        return True

    def _sync_gpu_combo(self) -> None:
        for i in range(self.gpu_combo.count()):
            if tuple(self.gpu_combo.itemData(i) or ()) == self.gpu_indices:
                self.gpu_combo.setCurrentIndex(i)
                return

    def _on_probe_error(self, exc: BaseException) -> None:
        self._probe_in_flight = False
        log.error("GPU probe failed", exc_info=exc)
        if self.probe_result is None:
            self._enter_planner_mode(None, str(exc))

    def _enter_planner_mode(self, result: Any | None, why: str = "") -> None:
        self.gpu_panel.show_probe(result, None)
        names = self.services.spec_names()
        pick = DEFAULT_PLANNER_GPU if DEFAULT_PLANNER_GPU in names else (names[0] if names else "")
        self.gpu_panel.set_spec_names(names, pick)
        self.gpu_panel.set_startup_limit("", False)
        problem = getattr(result, "error", None)
        reason = problem.message if problem is not None else (why or "no NVIDIA GPU found")
        self.statusBar().showMessage(f"planner mode: {reason}", 15_000)
        if pick:
            self._on_planner_gpu(pick)

    def _on_planner_gpu(self, name: str) -> None:
        try:
            self.target = self.services.target_from_spec(name)
        except KeyError:
            return
        self.replan()

    def _refresh_names(self) -> None:
        if self.gpu_panel.unknown_pids() and not self._probe_in_flight:
            self._probe_in_flight = True
            run_in_pool(self.services.probe, self._on_probe, self._on_probe_error)

    # =================================================================== profile

    @property
    def profile(self) -> st.Profile:
        return self.settings.active

    def _apply_profile(self, initial: bool = False) -> None:
        p = self.profile
        self.profile_combo.blockSignals(True)
        self.profile_combo.clear()
        self.profile_combo.addItems(list(self.settings.names))
        self.profile_combo.setCurrentText(p.name)
        self.profile_combo.blockSignals(False)
        plan = p.plan
        self.planner.set_goal(
            Goal(
                use_case=plan.use_case,
                context_tokens=plan.max_model_len or st.DEFAULT_CONTEXT_TOKENS,
                users=plan.max_num_seqs or st.DEFAULT_USERS,
                allow_4bit=plan.allow_4bit,
                kv_cache_dtype=plan.kv_cache_dtype,
                gpu_memory_utilization=plan.gpu_memory_utilization,
                enforce_eager=plan.enforce_eager,
                model_ref=p.model_ref,
            )
        )
        app = QGuiApplication.instance()
        if app is not None and not initial:
            from PySide6.QtWidgets import QApplication

            if isinstance(app, QApplication):
                theme.apply_theme(app, p.theme)
        if self.services.gpu_sampler is not None:
            self.services.gpu_sampler.set_rate(min(10.0, max(0.1, p.sampling_hz)))
        if not initial:
            self._discover_runtime()
            self.replan()

    def _on_profile_combo(self, index: int) -> None:
        name = self.profile_combo.itemText(index)
        if name and name != self.settings.active_profile:
            self.switch_profile(name)

    def switch_profile(self, name: str) -> None:
        """Make ``name`` the active profile, save, and re-plan with its goal."""
        self.settings = st.switch_profile(self.settings, name)
        self._save()
        self._apply_profile()

    def open_settings(self) -> st.Settings | None:
        """Run the settings dialog; returns the accepted settings (None when cancelled)."""
        dialog = self.make_settings_dialog()
        if dialog.exec() != SettingsDialog.DialogCode.Accepted:
            return None
        return self.accept_settings(dialog.result_settings())

    def make_settings_dialog(self) -> SettingsDialog:
        return SettingsDialog(
            self.settings,
            self,
            config_path=_home_relative(self.store.path),
            list_runtimes=self.services.list_runtimes,
            open_install=self._make_install_dialog,
            secrets_note=self.store.secrets.describe(),
        )

    def accept_settings(self, new: st.Settings) -> st.Settings:
        """Adopt settings edited in the dialog: save them and apply the active profile."""
        self.settings = new
        self._save()
        self._apply_profile()
        return new

    def _save(self) -> None:
        try:
            self.store.save(self.settings)
        except KvpilotError as exc:
            self._show_notice(f"Settings not saved: {exc.message}")

    def _remember_goal(self, goal: Goal) -> None:
        p = self.profile
        plan = replace(
            p.plan,
            use_case=goal.use_case,
            max_model_len=goal.context_tokens,
            max_num_seqs=goal.users,
            kv_cache_dtype=goal.kv_cache_dtype,
            gpu_memory_utilization=goal.gpu_memory_utilization,
            enforce_eager=goal.enforce_eager,
            allow_4bit=goal.allow_4bit,
        )
        new = replace(p, plan=plan, model_ref=goal.model_ref)
        if new != p:
            try:
                self.settings = st.update_profile(self.settings, new)
            except KvpilotError as exc:
                self.statusBar().showMessage(exc.message, 10_000)
                return
            self._save()

    def _show_load_warnings(self, warnings: tuple[st.SettingsWarning, ...]) -> None:
        if warnings:
            self._show_notice("\n".join(w.message for w in warnings))

    def _show_notice(self, text: str) -> None:
        self.notice.setText(text)
        self.notice.setVisible(True)
        self.notice_close.setVisible(True)

    def _hide_notice(self) -> None:
        self.notice.setVisible(False)
        self.notice_close.setVisible(False)

    # =================================================================== planning

    def _on_goal_changed(self, goal: Goal) -> None:
        self._remember_goal(goal)
        self.replan()

    def replan(self) -> None:
        """Ask the fit engine for ranked plans (pool); stale answers are dropped."""
        target = self.target
        if target is None:
            return
        goal = self.planner.goal()
        if self.runtime is not None:
            goal = replace(goal, vllm_version=self.runtime.version)
        self.plan_generation += 1
        gen = self.plan_generation
        self.planner.set_status("planning…")
        run_in_pool(
            lambda: self.services.plan(target, goal),
            lambda res: self._on_plans(gen, res),
            lambda exc: self._on_plan_error(gen, exc),
        )

    def _on_plans(self, gen: int, result: PlanResult) -> None:
        if gen != self.plan_generation:
            return
        fits = sum(1 for r in result.rows if r.fits)
        self.planner.set_status(
            f"{fits} plan(s) fit, {len(result.rows) - fits} do not" if result.rows else "no plans",
            theme.OK if fits else theme.FAIL,
        )
        self.planner.set_plans(result.rows, result.heading)

    def _on_plan_error(self, gen: int, exc: BaseException) -> None:
        if gen != self.plan_generation:
            return
        message = exc.message if isinstance(exc, KvpilotError) else f"planning failed: {exc}"
        if not isinstance(exc, KvpilotError):
            log.error("planning failed", exc_info=exc)
        self.planner.set_status(message, theme.FAIL)
        self.planner.set_plans([], "No plans")

    def _on_plan_selected(self, row: PlanRow | None) -> None:
        cap = row.capacity if row is not None and row.launchable else None
        self.gpu_panel.set_plan(cap)
        if row is None or row.inputs is None:
            self.planner.clear_feasibility("select a plan to see what else fits")
            return
        inputs = row.inputs
        goal = self.planner.goal()
        gen = self.plan_generation
        run_in_pool(
            lambda: self.services.feasibility(inputs, CHART_CONTEXTS),
            lambda res: self._on_feasibility(gen, row, goal, res),
        )

    def _on_feasibility(self, gen: int, row: PlanRow, goal: Goal, by_dtype: dict) -> None:
        if gen != self.plan_generation or self.planner.selected() is not row:
            return
        util = row.capacity.gpu_memory_utilization if row.capacity else None
        note = f"{row.title}, utilization {util:.2f}" if util else row.title
        self.planner.set_feasibility(CHART_CONTEXTS, by_dtype, goal, note)

    def copy_command(self) -> str | None:
        """Copy the selected plan's exact ``vllm serve`` command to the clipboard."""
        row = self.planner.selected()
        if row is None or row.inputs is None:
            return None
        try:
            text = self.services.launch_command_text(row.inputs, row.model_ref, self.profile)
        except KvpilotError as exc:
            self.statusBar().showMessage(exc.message, 10_000)
            return None
        QGuiApplication.clipboard().setText(text)
        self.statusBar().showMessage("vllm serve command copied", 5000)
        return text

    def export_plan(self, fmt: str) -> str | None:
        """Copy the selected plan as ``fmt`` (command, docker, compose, helm) to the clipboard."""
        row = self.planner.selected()
        if row is None or row.inputs is None:
            return None
        try:
            pinned = self._gpu_overrides(row).get("cuda_visible_devices", "")
            gpu_ids = tuple(pinned.split(",")) if pinned else ()
            text = self.services.export_text(
                row.inputs, row.model_ref, self.profile, fmt, gpu_ids=gpu_ids
            )
        except KvpilotError as exc:
            self.statusBar().showMessage(exc.message, 10_000)
            return None
        QGuiApplication.clipboard().setText(text)
        labels = {"command": "vllm serve command", "docker": "docker run command",
                  "compose": "Compose file", "helm": "Helm values"}
        self.statusBar().showMessage(f"{labels.get(fmt, fmt)} copied", 5000)
        return text

    def _browse_model(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "A model directory (with config.json)")
        if path:
            self.planner.set_model_ref(path)

    # =================================================================== server

    def launch_selected(self) -> None:
        row = self.planner.selected()
        if row is None:
            self.statusBar().showMessage("select a plan first", 5000)
            return
        self.launch_plan(row)

    def launch_plan(self, row: PlanRow) -> bool:
        """Launch a plan from the table; False (with the reason shown) when it cannot start."""
        if not row.launchable or row.inputs is None:
            self.statusBar().showMessage(f"{row.title} does not fit: {row.reason}", 10_000)
            return False
        inputs = row.inputs
        if self.services.plan_overrides:
            from kvpilot.core.fit.replan import with_settings

            inputs = with_settings(inputs, self.services.plan_overrides)
        request = LaunchRequest(inputs=inputs, model=row.model_ref, profile=self.profile)
        request.overrides.update(self._gpu_overrides(row))
        started = self.launch_request(request)
        used = self._plan_gpu_indices(row)
        if started and used and used != self.gpu_indices:
            # the telemetry samples exactly the GPUs the server runs on
            self.services.start_gpu_sampler(
                used if len(used) > 1 else used[0], self.profile.sampling_hz
            )
        return started

    def _plan_gpu_indices(self, row: PlanRow) -> tuple[int, ...]:
        """NVML indices of the GPUs a plan runs on (the selection unless the plan is one card
        of a set)."""
        target = self.target
        if target is None or not target.gpu_indices:
            return ()
        positions = getattr(row.source, "gpu_positions", ()) or ()
        if target.gpu_set is not None and positions:
            return tuple(target.gpu_indices[i] for i in positions)
        return target.gpu_indices

    def _gpu_overrides(self, row: PlanRow) -> dict[str, Any]:
        """The launch's GPUs by UUID (the plan's cards of a set, else the selection) and the
        pipeline stages vLLM needs to be told about."""
        target = self.target
        if target is None or not target.uuids:
            return {}
        uuids = target.uuids
        positions = getattr(row.source, "gpu_positions", ()) or ()
        if target.gpu_set is not None and positions:
            uuids = tuple(target.uuids[i] for i in positions)
        out: dict[str, Any] = {"cuda_visible_devices": ",".join(uuids)}
        pp = getattr(row.inputs, "pipeline_parallel_size", 1) if row.inputs else 1
        if pp > 1:
            from kvpilot.core.vllm.command import parse_extra_args

            out["extra_args"] = (
                *parse_extra_args(self.profile.extra_args),
                "--pipeline-parallel-size", str(pp),
            )
        return out

    def launch_request(self, request: LaunchRequest) -> bool:
        """Start vLLM for ``request``; False (with the reason shown) when it cannot start."""
        if self.runtime is None:
            self.server_panel.set_launch_blocked(self.runtime_problem or "vLLM not found")
            return False
        if self.services.server_running():
            self.statusBar().showMessage("a server is already running; stop it first", 5000)
            return False
        try:
            request.predicted = self.services.compute_capacity(request.inputs)
        except KvpilotError:
            request.predicted = None
        try:
            spec = self.services.launch_spec(request)
        except KvpilotError as exc:
            self._show_launch_error(exc.message)
            return False
        self.current_request = request
        self._predicted = request.predicted
        self._reported = None
        self.last_failure = None
        self.banner.setVisible(False)
        self.log_view.clear()
        self.started_by_us = True
        self.server_panel.show_state("starting", model=request.model)
        self.server_panel.show_capacity(self._predicted_tokens(), None)
        runtime = self.runtime
        inputs = request.inputs
        # a download of the model may come first and take minutes: its own thread, not the pool
        run_in_thread(
            lambda: self.services.start_server(runtime, spec, inputs),
            self._on_server_started,
            self._on_server_start_error,
            name="kvpilot-launch",
        )
        return True

    # ----------------------------------------------------------------- attach (not owned)

    def open_attach(self, *, modal: bool = True) -> AttachDialog:
        """Ask for a server's URL (and key), then :meth:`attach` to it."""
        dialog = AttachDialog(self)
        dialog.accepted.connect(lambda: self.attach(*dialog.values()))
        if modal:
            dialog.exec()
        else:
            dialog.show()
        return dialog

    def attach(
        self, url: str, api_key: str | None = None, log_path: str | None = None
    ) -> bool:
        """Watch the server at ``url`` (kvpilot does not own it: Detach, never Stop).

        False (with the reason shown) while kvpilot runs a server of its own.
        """
        if self.services.server_running():
            self.statusBar().showMessage("a server is running; stop it before attaching", 8000)
            return False
        measured = self.target is not None and self.target.measured
        if self.target is not None and measured:
            self.services.attach_gpu = (self.target.total_bytes, self.target.name)
        self.server_panel.show_state("starting", detail=f"attaching to {url}")
        run_in_pool(
            lambda: self.services.attach(url, api_key, log_path),
            lambda sample: self._on_attached(sample, api_key),
            self._on_attach_error,
        )
        return True

    def _on_attached(self, sample: Any, api_key: str | None) -> None:
        ident = sample.identity
        self.attached = ident
        self._attached_key = api_key
        self.started_by_us = False
        self.services.telemetry.clear()
        self.services.telemetry.set_vllm_pids(())
        version = f"vLLM {ident.version}" if ident.version else "vLLM"
        self.server_panel.show_state(
            ATTACHED, model=ident.model_id or "", endpoint=f"{ident.base_url}/v1",
            detail=f"{version}, not started by kvpilot",
        )
        cap = sample.capacity
        if cap is not None:
            self.server_panel.show_capacity(cap.predicted_kv_tokens, cap.reported_kv_tokens)
        self.services.start_metrics(ident.base_url, self.profile.sampling_hz, api_key)
        self.tabs.setCurrentWidget(self.dashboard)
        self.statusBar().showMessage(f"watching {ident.base_url}", 5000)

    def _on_attach_error(self, exc: BaseException) -> None:
        message = exc.message if isinstance(exc, KvpilotError) else str(exc)
        self.server_panel.show_state(None)
        self.statusBar().showMessage(message, 15_000)

    def detach(self) -> None:
        """Stop watching the attached server (it keeps running)."""
        if self.attached is None:
            return
        self.services.stop_metrics()
        url = self.attached.base_url
        self.attached = None
        self._attached_key = None
        self.server_panel.show_state(None)
        self.server_panel.show_capacity(None, None)
        self.statusBar().showMessage(f"stopped watching {url}; it keeps running", 5000)

    def _predicted_tokens(self) -> int | None:
        cap = self._predicted
        if cap is None or getattr(cap, "verdict", "") == "does_not_fit":
            return None
        return int(cap.kv_cache_tokens)

    def _on_server_started(self, sup: Any) -> None:
        self.log_view.set_log_path(sup.log_path)

    def _on_server_start_error(self, exc: BaseException) -> None:
        message = exc.message if isinstance(exc, KvpilotError) else str(exc)
        if not isinstance(exc, KvpilotError):
            log.error("server start failed", exc_info=exc)
        self.server_panel.show_state("failed", detail=message)
        if isinstance(exc, StartupRefusedError) and self.current_request is not None:
            # not launched: the free memory now is below what the plan requests; the
            # fallbacks start from the fresh reading
            self.current_request = replace(self.current_request, inputs=exc.refusal.inputs)
            self._on_failure(exc.refusal.failure, after_ready=False)
            return
        self._show_launch_error(message)

    def _show_launch_error(self, message: str) -> None:
        self.banner.show_failure(message, [])
        self.statusBar().showMessage(message, 15_000)

    def stop_server(self, then: Callable[[], None] | None = None) -> bool:
        """Stop the server in the background; ``then`` runs on the GUI thread afterwards."""
        if not self.services.server_running() or self._stop_in_flight:
            if then is not None and not self._stop_in_flight:
                then()
            return False
        self._stop_in_flight = True
        self.server_panel.show_state("stopping")

        def done(_: Any = None) -> None:
            self._stop_in_flight = False
            self.gpu_panel.set_server((), None)
            if then is not None:
                then()

        run_in_pool(self.services.stop_server, done, lambda exc: done())
        return True

    # ----------------------------------------------------------------- supervisor events

    def _on_download_progress(self, progress: Any) -> None:
        """Byte-level progress of a model download that runs before vLLM starts."""
        self.server_panel.show_download(progress.bytes_done, progress.bytes_total)

    def drain_log(self) -> None:
        """Show the output lines that arrived since the last call (one batch per timer tick)."""
        lines, dropped = self.services.take_log_lines()
        if not lines and not dropped:
            return
        if self.services.supervisor is None:
            return
        batch: list[tuple[str, str]] = []
        if dropped:
            batch.append(
                ("WARNING", f"… {dropped:,} lines of a log flood are not shown here; the log "
                 "file has every line")
            )
        for ev in lines:
            batch.append((line_level(ev.line, ev.stream), ev.line))
        self.log_view.append_many(batch)

    def _on_server_event(self, ev: Any) -> None:
        if self.services.supervisor is None:
            return
        if isinstance(ev, sv.LogLineEvent):
            self.log_view.append(line_level(ev.line, ev.stream), ev.line)
        elif isinstance(ev, logparse.PhaseEvent):
            self.server_panel.show_phase(ev.phase)
        elif isinstance(ev, sv.StateEvent):
            self._on_state(ev)
        elif isinstance(ev, sv.CapacityUpdatedEvent):
            self._reported = ev.capacity
            tokens = ev.capacity.kv_cache_tokens
            self.server_panel.show_capacity(self._predicted_tokens(), tokens)
            sup = self.services.supervisor
            if sup is not None and sup.state == sv.READY:
                self.gpu_panel.set_server(sup.tree_pids(), ev.capacity)

    def _on_state(self, ev: Any) -> None:
        sup = self.services.supervisor
        model = sup.model_name if sup is not None else ""
        if ev.state == sv.READY and sup is not None:
            endpoint = f"{sup.base_url}/v1"
            self.server_panel.show_state(sv.READY, model=model, endpoint=endpoint)
            pids = sup.tree_pids()
            self.services.telemetry.set_vllm_pids(pids)
            self.gpu_panel.set_server(pids, self._reported)
            api_key = self.current_request.profile.api_key if self.current_request else ""
            self.services.start_metrics(sup.base_url, self.profile.sampling_hz, api_key or None)
            self.tabs.setCurrentWidget(self.dashboard)
        elif ev.state == sv.FAILED:
            self.services.stop_metrics()
            self.server_panel.show_state(sv.FAILED, model=model)
            self.gpu_panel.set_server((), None)
            self._on_failure(ev.failure, after_ready=ev.previous == sv.READY)
        elif ev.state == sv.STOPPED:
            self.services.stop_metrics()
            self.server_panel.show_state(sv.STOPPED, model=model)
            self.gpu_panel.set_server((), None)
        else:
            self.server_panel.show_state(ev.state, model=model)
            if ev.phase:
                self.server_panel.show_phase(ev.phase)

    def _on_failure(self, failure: Any, *, after_ready: bool) -> None:
        self.last_failure = failure
        message = getattr(failure, "message", None) or "vLLM stopped without saying why"
        inputs = self.current_request.inputs if self.current_request else None
        if failure is None or inputs is None:
            self.banner.show_failure(message, [])
            return
        self.banner.show_failure(message, [], note="working out what would fit…")
        if after_ready:
            self.banner.set_title("the server stopped:")
        free = self.target.free_bytes if self.target is not None else None
        run_in_pool(
            lambda: self.services.propose_fallbacks(failure, inputs, free),
            lambda options: self._on_fallbacks(failure, options, after_ready),
            lambda exc: self._on_fallbacks(failure, [], after_ready, str(exc)),
        )

    def _on_fallbacks(
        self, failure: Any, options: list[FallbackOption], after_ready: bool, error: str = ""
    ) -> None:
        if failure is not self.last_failure:
            return
        self.fallback_options = list(options)
        choices = [
            FallbackChoice(label=_option_label(o), tooltip=_option_tooltip(o), payload=o)
            for o in options
        ]
        note = "" if choices else (error or "no automatic fallback for this failure; see the log")
        self.banner.show_failure(str(getattr(failure, "message", failure)), choices, note=note)
        if after_ready:
            self.banner.set_title("the server stopped:")

    def apply_fallback(self, option: Any) -> bool:
        """Relaunch with a fallback option's plan inputs (one click on the banner)."""
        req = self.current_request
        inputs = getattr(option, "inputs", None)
        if req is None or inputs is None:
            return False
        model = req.model
        if getattr(inputs.model, "model_id", None) != getattr(req.inputs.model, "model_id", None):
            model = inputs.model.model_id  # a smaller checkpoint of the same family
        new = LaunchRequest(inputs=inputs, model=model, profile=req.profile)
        self.banner.setVisible(False)

        def relaunch() -> None:
            self.launch_request(new)

        if self.services.server_running():
            return self.stop_server(then=relaunch)
        relaunch()
        return True

    def apply_pressure_fix(self, kind: str) -> bool:
        """Relaunch the running plan with the fix a pressure signal suggests."""
        req = self.current_request
        if req is None:
            return False
        from kvpilot.core.fit.fallback import fix_for_pressure

        inputs = fix_for_pressure(kind, req.inputs, req.predicted)
        if inputs is None:
            return False
        new = LaunchRequest(inputs=inputs, model=req.model, profile=req.profile)

        def relaunch() -> None:
            self.launch_request(new)

        if self.services.server_running():
            return self.stop_server(then=relaunch)
        relaunch()
        return True

    def open_benchmark(self, *, modal: bool = True) -> BenchmarkDialog | None:
        """The load-test dialog for the running or attached server (None, with a message, when
        there is none)."""
        from kvpilot.core.vllm.client import LoadTestConfig, run_load_test

        sup = self.services.supervisor
        if self.attached is not None:
            base_url, model = self.attached.base_url, self.attached.model_id or ""
            api_key: str | None = self._attached_key
        elif sup is not None and sup.state == sv.READY:
            base_url, model = sup.base_url, sup.model_name
            api_key = self.current_request.profile.api_key if self.current_request else ""
        else:
            self.statusBar().showMessage("start a server first: the benchmark needs it ready", 8000)
            return None
        dialog = BenchmarkDialog(
            base_url,
            model,
            self.services.bridge,
            run_load_test,
            LoadTestConfig,
            self,
            api_key=api_key or None,
        )
        if modal:
            dialog.exec()
        else:
            dialog.show()
        return dialog

    def _on_gpu_sample(self, sample: Any) -> None:
        if sample.ok:
            self.gpu_panel.update_sample(sample)

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
        if self.services.server_running() and self.started_by_us:
            if not self.confirm_stop():
                event.ignore()
                return
            event.ignore()
            self.statusBar().showMessage("stopping the server before quitting…")
            self.setEnabled(False)
            self.stop_server(then=self._finish_close)
            return
        self._finish_close()
        event.accept()

    def _finish_close(self) -> None:
        self.planner._debounce.stop()
        self._remember_goal(self.planner.goal())  # an edit made just before closing
        self.settings = replace(self.settings, window_geometry=self.geometry_text())
        self._save()
        self.dashboard.timer.stop()
        self._log_timer.stop()
        self.services.stop_metrics()
        self.services.stop_gpu_sampler()
        if not self._closing:
            self._closing = True
            if self.isVisible():
                self.close()


def _option_label(option: FallbackOption) -> str:
    """The button text: the option's label already carries its predicted effect."""
    return option.label


def _option_tooltip(option: FallbackOption) -> str:
    """What differs from the failed plan, and a warning when it is predicted not to fit."""
    if option.predicted_fits:
        return option.change
    return f"{option.change} (predicted not to fit either)"


def _home_relative(path: Any) -> str:
    """``~/.config/kvpilot/settings.json`` rather than the full home path."""
    from pathlib import Path

    p = Path(path)
    try:
        return "~/" + str(p.relative_to(Path.home()))
    except ValueError:
        return str(p)
