"""The server kvpilot runs: launch, stop, the supervisor's events and the log.

A launch builds a :class:`~kvpilot.gui.services.LaunchRequest` from the selected plan (with the
plan's GPUs pinned by UUID), and starts it on a thread of its own (a model download may come
first). The supervisor's events arrive as signals: phases and capacity go to the server panel,
readiness starts the /metrics scraper and shows the dashboard, a failure goes to ``failed`` (the
fallback controller). Output lines are taken in batches on a timer, never one signal per line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer

from kvpilot.core.base.errors import FolderError, KvpilotError, ProcUnreadableError
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.core.base.plan import Verdict
from kvpilot.gui.controllers import Controller, _nothing
from kvpilot.gui.controllers.gpus import TargetController
from kvpilot.gui.services import LaunchRequest
from kvpilot.gui.workers import run_in_thread

if TYPE_CHECKING:
    from kvpilot.core.base.failures import Failure
    from kvpilot.core.base.plan import Capacity
    from kvpilot.core.fit.measurements import ReportedCapacity
    from kvpilot.core.hub.download import DownloadProgress
    from kvpilot.core.vllm.supervisor import StateEvent, Supervisor
    from kvpilot.gui.controllers.gpus import GpuController
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.records import PlanRow
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

log = logging.getLogger("kvpilot.gui")

#: how often the server log view takes the new output lines (ms)
LOG_DRAIN_MS = 100


class ServerController(TargetController):
    """Owns the launch in progress (``current_request``) and whether this window started it."""

    def __init__(
        self, window: WindowWidgets, gpus: GpuController, runtimes: RuntimeController
    ) -> None:
        super().__init__(window, gpus, runtimes)
        #: called when a launch starts (a new failure may follow)
        self.launching: Callable[[], None] = _nothing
        #: called with a failure (None: vLLM said nothing) and whether the server was ready
        self.failed: Callable[[Failure | None, bool], None] = _nothing
        self.current_request: LaunchRequest | None = None
        #: the server is this window's (closing asks and stops it)
        self.started_by_us = False
        self._stop_in_flight = False
        #: a launch handed to its thread whose supervisor is not there yet: a second Launch
        #: (F5 pressed twice) in that gap would stop the first and start another
        self._start_in_flight = False
        self._predicted: Capacity | None = None
        self._reported: ReportedCapacity | None = None
        self.log_timer = QTimer(window)
        self.log_timer.setInterval(LOG_DRAIN_MS)
        self.log_timer.timeout.connect(self.drain_log)
        self.log_timer.start()

    # ----------------------------------------------------------------- launch

    def launch_selected(self) -> None:
        row = self.window.planner.selected()
        if row is None:
            self.say("select a plan first", 5000)
            return
        self.launch_plan(row)

    def launch_plan(self, row: PlanRow) -> bool:
        """Launch a plan from the table; False (with the reason shown) when it cannot start."""
        if not row.launchable or row.inputs is None:
            self.say(f"{row.title} does not fit: {row.reason}", 10_000)
            return False
        inputs = row.inputs
        if self.services.plan_overrides:
            from kvpilot.core.app.launch_settings import with_settings

            inputs = with_settings(inputs, self.services.plan_overrides)
        request = LaunchRequest(inputs=inputs, model=row.model_ref, profile=self.window.profile)
        request.overrides.update(self.gpus.gpu_overrides(row))
        self.services.begin_launches(self.window.profile)  # a new run: its own fallback count
        started = self.launch_request(request)
        used = self.gpus.plan_gpu_indices(row)
        if started and used and used != self.gpus.gpu_indices:
            self.gpus.sample(used)  # the telemetry samples exactly the GPUs the server runs on
        return started

    def launch_request(self, request: LaunchRequest) -> bool:
        """Start vLLM for ``request``; False (with the reason shown) when it cannot start."""
        window = self.window
        runtime = self.runtimes.runtime
        if runtime is None:
            problem = self.runtimes.runtime_problem
            window.server_panel.set_launch_blocked(problem or "vLLM not found")
            return False
        if self._start_in_flight:
            self.say("vLLM is already starting; wait for it, or stop it first", 5000)
            return False
        if self.services.server_running():
            self.say("a server is already running; stop it first", 5000)
            return False
        try:
            spec = self.services.launch_spec(request)
        except KvpilotError as exc:
            self.show_launch_error(exc.message)
            return False
        try:  # what this launch gets, its extra arguments included (a fixed KV block count)
            request.predicted = self.services.launch_capacity(request.inputs, spec.extra_args)
        except KvpilotError:
            request.predicted = None
        self.current_request = request
        self._predicted = request.predicted
        self._reported = None
        self._register_launch_cap(request, runtime.version, spec.gpu_memory_utilization)
        self.launching()
        window.banner.setVisible(False)
        window.log_view.clear()
        self.started_by_us = True
        window.server_panel.show_state(SupervisorState.STARTING, model=request.model)
        window.server_panel.show_capacity(self._predicted_tokens(), None)
        inputs = request.inputs
        self._start_in_flight = True
        # a download of the model may come first and take minutes: its own thread, not the pool
        run_in_thread(
            lambda: self.services.start_server(runtime, spec, inputs),
            self._on_server_started,
            self._on_server_start_error,
            name="kvpilot-launch",
        )
        return True

    def _register_launch_cap(
        self, request: LaunchRequest, version: str | None, utilization: float | None
    ) -> None:
        """vLLM 0.34 on a desktop or shared GPU: say why the launch is capped, and have the
        dashboard warn when free memory falls under the room the cap leaves
        (:func:`kvpilot.core.app.launch_settings.planned_launch_cap`)."""
        from kvpilot.core.app.launch_settings import planned_launch_cap

        cap = planned_launch_cap(request.inputs, version, utilization)
        self.services.telemetry.set_launch_cap(cap)
        if cap is not None:
            self.say(cap.reason, 20_000)

    def adopted(self, model: str) -> None:
        """An orphaned server is supervised from now on, as if this window had started it."""
        self.window.log_view.clear()
        self.started_by_us = True  # its pidfile is ours now: closing asks and stops it
        self.current_request = None
        self.window.server_panel.show_state(SupervisorState.STARTING, model=model)

    def _predicted_tokens(self) -> int | None:
        cap = self._predicted
        if cap is None or cap.verdict is Verdict.DOES_NOT_FIT:
            return None
        return int(cap.kv_cache_tokens)

    def _on_server_started(self, sup: Supervisor) -> None:
        self._start_in_flight = False
        self.window.log_view.set_log_path(sup.log_path)

    def _on_server_start_error(self, exc: BaseException) -> None:
        from kvpilot.core.app.environment import environment_problem
        from kvpilot.core.app.launch import StartupRefusedError

        self._start_in_flight = False
        problem = exc if isinstance(exc, KvpilotError) else environment_problem(exc)
        message = str(problem or exc)
        if problem is None:
            log.error("server start failed", exc_info=exc)
        self.window.server_panel.show_state(SupervisorState.FAILED, detail=message)
        if isinstance(exc, StartupRefusedError) and self.current_request is not None:
            # not launched: the free memory now is below what the plan requests; the
            # fallbacks start from the fresh reading
            self.current_request = replace(self.current_request, inputs=exc.refusal.inputs)
            self.failed(exc.refusal.failure, False)
            return
        self.show_launch_error(message)
        if isinstance(problem, (FolderError, ProcUnreadableError)):  # the machine, not vLLM
            self.window.banner.set_title("vLLM was not started:")

    def show_folder_problems(self, problems: tuple[FolderError, ...]) -> None:
        """kvpilot's own folders that cannot be written (checked at start): one sentence each,
        with the variable that moves the folder, in the banner."""
        if not problems:
            return
        self.window.banner.show_failure(" ".join(p.message for p in problems), [])
        self.window.banner.set_title("kvpilot cannot keep its files:")

    def show_launch_error(self, message: str) -> None:
        self.window.banner.show_failure(message, [])
        self.say(message, 15_000)

    def stop_server(self, then: Callable[[], None] | None = None) -> bool:
        """Stop the server in the background; ``then`` runs on the GUI thread afterwards."""
        if not self.services.server_running() or self._stop_in_flight:
            if then is not None and not self._stop_in_flight:
                then()
            return False
        self._stop_in_flight = True
        self.window.server_panel.show_state(SupervisorState.STOPPING)

        def done(_: object = None) -> None:
            self._stop_in_flight = False
            self.window.gpu_panel.set_server((), None)
            if then is not None:
                then()

        self.in_pool(self.services.stop_server, done, lambda _exc: done())
        return True

    def relaunch(self, request: LaunchRequest) -> bool:
        """Launch ``request``, stopping the running server first."""

        def launch() -> None:
            self.launch_request(request)

        if self.services.server_running():
            return self.stop_server(then=launch)
        launch()
        return True

    # ----------------------------------------------------------------- supervisor events

    def on_download_progress(self, progress: DownloadProgress) -> None:
        """Byte-level progress of a model download that runs before vLLM starts."""
        self.window.server_panel.show_download(progress.bytes_done, progress.bytes_total)

    def drain_log(self) -> None:
        """Show the output lines that arrived since the last call (one batch per timer tick)."""
        lines, dropped = self.services.take_log_lines()
        if not lines and not dropped:
            return
        if self.services.supervisor is None:
            return
        from kvpilot.core.app.server_events import leveled_lines

        batch: list[tuple[str, str]] = []
        if dropped:
            batch.append(
                ("WARNING", f"… {dropped:,} lines of a log flood are not shown here; the log "
                 "file has every line")
            )
        batch.extend(leveled_lines(lines))
        self.window.log_view.append_many(batch)

    def on_server_event(self, ev: object) -> None:
        """A supervisor event (queued onto the GUI thread by the bridge)."""
        if self.services.supervisor is None:
            return
        from kvpilot.core.app.server_events import server_news

        window = self.window
        news = server_news(ev)
        if news.log is not None:
            window.log_view.append(*news.log)
        elif news.phase is not None:
            window.server_panel.show_phase(news.phase)
        elif news.state is not None:
            self._on_state(news.state)
        elif news.capacity is not None:
            self._reported = news.capacity
            window.server_panel.show_capacity(self._predicted_tokens(),
                                              news.capacity.kv_cache_tokens)
            sup = self.services.supervisor
            if sup is not None and sup.state == SupervisorState.READY:
                window.gpu_panel.set_server(sup.tree_pids(), news.capacity)

    def _on_state(self, ev: StateEvent) -> None:
        window = self.window
        sup = self.services.supervisor
        model = sup.model_name if sup is not None else ""
        if ev.state == SupervisorState.READY and sup is not None:
            window.server_panel.show_state(
                SupervisorState.READY, model=model, endpoint=f"{sup.base_url}/v1"
            )
            pids = sup.tree_pids()
            self.services.telemetry.set_vllm_pids(pids)
            window.gpu_panel.set_server(pids, self._reported)
            api_key = self.current_request.profile.api_key if self.current_request else ""
            self.services.start_metrics(sup.base_url, window.profile.sampling_hz, api_key or None)
            window.tabs.setCurrentWidget(window.dashboard)
        elif ev.state == SupervisorState.FAILED:
            self.services.stop_metrics()
            window.server_panel.show_state(SupervisorState.FAILED, model=model)
            window.gpu_panel.set_server((), None)
            self.failed(ev.failure, ev.previous == SupervisorState.READY)
        elif ev.state == SupervisorState.STOPPED:
            self.services.stop_metrics()
            window.server_panel.show_state(SupervisorState.STOPPED, model=model)
            window.gpu_panel.set_server((), None)
        else:
            window.server_panel.show_state(ev.state, model=model)
            if ev.phase:
                window.server_panel.show_phase(ev.phase)

    def serving(self) -> tuple[str, str, str | None] | None:
        """(base URL, model, API key) of this window's server once it is ready, else None."""
        sup = self.services.supervisor
        if sup is None or sup.state != SupervisorState.READY:
            return None
        api_key = self.current_request.profile.api_key if self.current_request else ""
        return sup.base_url, sup.model_name, api_key or None


class ServerAware(Controller):
    """Base of the controllers that act on this window's server and the GPUs it runs on."""

    def __init__(
        self, window: WindowWidgets, gpus: GpuController, server: ServerController
    ) -> None:
        super().__init__(window)
        self.gpus = gpus
        self.server = server
