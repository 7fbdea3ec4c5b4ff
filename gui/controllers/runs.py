"""The Runs tab: read the run records on the pool, compare them, relaunch one.

Records are read (:func:`kvpilot.core.app.runs.list_runs`, as ``kvpilot runs`` reads them) when
the tab is shown, on Refresh and after a server of this window ended. Relaunch plans the run's
model with the run's settings on the GPU the window plans for
(:meth:`~kvpilot.core.hardware.target.DeviceTarget.plan_inputs`, on the pool) and launches it
through the server controller like a plan of the table, under the run's profile when it still
exists (else the active one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.core.base.errors import KvpilotError
from kvpilot.gui.controllers.gpus import TargetController
from kvpilot.gui.services import LaunchRequest

if TYPE_CHECKING:
    from kvpilot.core.base.plan import PlanInputs
    from kvpilot.core.runs.record import RunRecord
    from kvpilot.core.runs.store import RunList
    from kvpilot.gui.controllers.gpus import GpuController
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.controllers.server import ServerController
    from kvpilot.gui.panels.runs_view import RunsView
    from kvpilot.gui.widgets.window_widgets import WindowWidgets


class RunsController(TargetController):
    """Feeds the Runs view; ``reading`` is True while the pool reads the folder."""

    def __init__(self, window: WindowWidgets, view: RunsView, server: ServerController,
                 gpus: GpuController, runtimes: RuntimeController) -> None:
        super().__init__(window, gpus, runtimes)
        self.view = view
        self.server = server
        self.reading = False

    def refresh(self) -> None:
        """Read the records (pool) and show them."""
        from kvpilot.core.app.runs import list_runs

        data_dir = self.services.data_dir
        self.reading = True
        self.in_pool(lambda: list_runs(data_dir), self._on_records, self._on_error)

    def on_server_event(self, ev: object) -> None:
        """A run of this window ended (its record is written by then): re-read when shown."""
        from kvpilot.core.app.launch import run_ended

        if run_ended(ev) and self.window.tabs.currentWidget() is self.view:
            self.refresh()

    def _on_records(self, found: RunList) -> None:
        self.reading = False
        self.view.set_runs(list(found.records), found.warnings)

    def _on_error(self, exc: BaseException) -> None:
        self.reading = False
        self.say(f"could not read the run records: {exc}", 10_000)

    def relaunch(self, record: RunRecord) -> None:
        """Serve ``record``'s model with its settings again (planned on the pool)."""
        runtime, target = self.runtimes.runtime, self.gpus.target
        if runtime is None or target is None:
            self.say("no vLLM or no GPU to launch on yet", 8000)
            return
        if self.services.server_running():
            self.say("a server is already running; stop it first", 8000)
            return
        settings = self.window.settings
        profile = (settings.profile(record.profile) if record.profile in settings.names
                   else self.window.profile)
        version = runtime.version

        def plan() -> PlanInputs:
            spec = self.services.load_model(record.model)
            return target.plan_inputs(spec, version, record.serving_settings())

        def launch(inputs: PlanInputs) -> None:
            request = LaunchRequest(inputs=inputs, model=record.model, profile=profile)
            self.services.begin_launches(profile)  # a new run: its own fallback count
            if self.server.launch_request(request):
                self.say(f"relaunching run {record.id}", 8000)
                self.window.tabs.setCurrentWidget(self.window.dashboard)

        def failed(exc: BaseException) -> None:
            message = exc.message if isinstance(exc, KvpilotError) else str(exc)
            self.say(f"cannot relaunch run {record.id}: {message}", 15_000)

        self.in_pool(plan, launch, failed)
