"""The GPUs: the probe, which of this machine's GPUs the window uses, planner mode without one.

The first probe fills the GPU choice (several GPUs: each, and all together) and selects the one
:func:`~kvpilot.core.app.detect.gpu_choices` prefers; selecting GPUs sets the planner's
target, starts the sampler and calls ``target_changed``. Without a GPU the window plans for a card
from the spec table. Later probes only refresh the process names the sampler cannot read. Which
of the selected GPUs a plan runs on (a set's single card, or all) is answered here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from shiboken6 import Shiboken

from kvpilot.core.base.errors import KvpilotError
from kvpilot.gui.controllers import Controller, _nothing

if TYPE_CHECKING:
    from kvpilot.core.app.detect import GpuChoice
    from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult
    from kvpilot.core.hardware.sampler import GpuSample
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.records import PlanRow
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

log = logging.getLogger("kvpilot.gui")

DEFAULT_PLANNER_GPU = "NVIDIA GeForce RTX 4090"
#: how often the process names of unknown pids are looked up again (ms)
NAMES_REFRESH_MS = 5000


class GpuController(Controller):
    """Owns the probe result, the planner's target and the GPUs in use."""

    def __init__(self, window: WindowWidgets, runtimes: RuntimeController) -> None:
        super().__init__(window)
        #: the vLLM launches use: the launch line speaks of its release
        self.runtimes = runtimes
        #: called when the planner's target changed (a GPU selected, a spec-table card picked)
        self.target_changed: Callable[[], None] = _nothing
        self.probe_result: ProbeResult | None = None
        self.target: DeviceTarget | None = None
        #: this machine's GPUs in use (NVML indices; empty in planner mode)
        self.gpu_indices: tuple[int, ...] = ()
        self._probe_in_flight = False
        self.names_refresh = QTimer(window)
        self.names_refresh.setObjectName("gpu-process-names")
        self.names_refresh.setInterval(NAMES_REFRESH_MS)
        self.names_refresh.timeout.connect(self.refresh_names)

    def probe(self) -> None:
        """One NVML pass on the pool."""
        self._probe_in_flight = True
        self.in_pool(self.services.probe, self.on_probe, self.on_probe_error)

    def on_probe(self, result: ProbeResult) -> None:
        self._probe_in_flight = False
        from kvpilot.core.app.detect import gpu_choices

        first = self.probe_result is None
        self.probe_result = result
        offered = gpu_choices(result)
        if not offered.choices:
            if first:
                self.enter_planner_mode(result)
            return
        gpus = [g for g in result.gpus if not g.lost]
        if first:
            self._fill_gpu_combo(offered.choices)
            self.gpu_indices = offered.preferred
        gpu = next((g for g in gpus if g.index == self.gpu_indices[0]), gpus[0])
        self._show_gpu(result, gpu)
        if first:
            self.select_gpus(self.gpu_indices)
            self.names_refresh.start()
            self.say(f"{gpu.name}: ready to plan", 5000)

    def _show_gpu(self, result: ProbeResult, gpu: GpuSnapshot) -> None:
        self.window.gpu_panel.show_probe(result, gpu)
        self._show_launch_now(gpu)

    def _show_launch_now(self, gpu: GpuSnapshot) -> None:
        """What a launch on ``gpu`` could get now, in the terms of the vLLM release found
        (:func:`kvpilot.core.app.detect.launch_now`; none found yet: the start-up check)."""
        from kvpilot.core.app.detect import launch_now

        runtime = self.runtimes.runtime
        launch = launch_now(gpu, None if runtime is None else runtime.version)
        self.window.gpu_panel.set_startup_limit(launch.text, launch.tight)

    def on_runtime_changed(self) -> None:
        """A vLLM release was found: say the launch line of the GPU shown in its terms."""
        result = self.probe_result
        if result is None or not self.gpu_indices:
            return
        gpu = next((g for g in result.gpus if g.index == self.gpu_indices[0] and not g.lost),
                   None)
        if gpu is not None:
            self._show_launch_now(gpu)

    def _fill_gpu_combo(self, choices: tuple[GpuChoice, ...]) -> None:
        """Every GPU NVML reports, plus all of them together when there are several
        (:func:`kvpilot.core.app.detect.gpu_choices`)."""
        combo = self.window.gpu_combo
        combo.blockSignals(True)
        combo.clear()
        for choice in choices:
            combo.addItem(choice.label, choice.indices)
        combo.blockSignals(False)
        several = len(choices) > 1
        combo.setVisible(several)
        self.window.gpu_combo_label.setVisible(several)

    def on_gpu_combo(self, index: int) -> None:
        indices = self.window.gpu_combo.itemData(index)
        if indices and tuple(indices) != self.gpu_indices:
            self.select_gpus(tuple(indices))

    def select_gpus(self, indices: tuple[int, ...]) -> bool:
        """Plan for, launch on and sample exactly this machine's GPUs ``indices``.

        False (with the reason shown) while a server runs or for a GPU NVML does not report.
        """
        result = self.probe_result
        if result is None or not result.ok:
            return False
        if self.services.server_running() and indices != self.gpu_indices:
            self.say("stop the server before switching GPUs", 8000)
            self._sync_gpu_combo()
            return False
        try:
            target = self.services.target_from_selection(result, indices)
        except KvpilotError as exc:
            self.say(exc.message, 10_000)
            self._sync_gpu_combo()
            return False
        self.gpu_indices = indices
        self.target = target
        self._sync_gpu_combo()
        self._show_gpu(result, {g.index: g for g in result.gpus}[indices[0]])
        self.sample(indices)
        self.target_changed()
        return True

    def sample(self, indices: tuple[int, ...]) -> None:
        """Sample exactly the GPUs ``indices`` (one, or several combined) from now on."""
        self.services.start_gpu_sampler(
            indices if len(indices) > 1 else indices[0], self.window.profile.sampling_hz
        )

    def _sync_gpu_combo(self) -> None:
        combo = self.window.gpu_combo
        for i in range(combo.count()):
            if tuple(combo.itemData(i) or ()) == self.gpu_indices:
                combo.setCurrentIndex(i)
                return

    def on_probe_error(self, exc: BaseException) -> None:
        self._probe_in_flight = False
        log.error("GPU probe failed", exc_info=exc)
        if self.probe_result is None:
            self.enter_planner_mode(None, str(exc))

    def enter_planner_mode(self, result: ProbeResult | None, why: str = "") -> None:
        """No GPU: plan for a card of the spec table (launch stays possible only with vLLM)."""
        panel = self.window.gpu_panel
        panel.show_probe(result, None)
        names = self.services.spec_names()
        pick = DEFAULT_PLANNER_GPU if DEFAULT_PLANNER_GPU in names else (names[0] if names else "")
        panel.set_spec_names(names, pick)
        panel.set_startup_limit("", False)
        problem = result.error if result is not None else None
        reason = problem.message if problem is not None else (why or "no NVIDIA GPU found")
        self.say(f"planner mode: {reason}", 15_000)
        if pick:
            self.on_planner_gpu(pick)

    def on_planner_gpu(self, name: str) -> None:
        try:
            self.target = self.services.target_from_spec(name)
        except KeyError:
            return
        self.target_changed()

    def refresh_names(self) -> None:
        """Probe again when the sampler shows pids whose process name is not known yet."""
        if self.window.gpu_panel.unknown_pids() and not self._probe_in_flight:
            self.probe()

    def on_gpu_sample(self, sample: GpuSample) -> None:
        # the sampler thread stops in the background: a last sample may arrive after the
        # window's widgets were deleted
        if sample.ok and Shiboken.isValid(self.window.gpu_panel):
            self.window.gpu_panel.update_sample(sample)

    # ----------------------------------------------------------------- a plan's GPUs

    def _plan_positions(self, row: PlanRow) -> tuple[int, ...] | None:
        """Positions in the target's GPUs that a plan runs on: the plan's cards of a set, else
        all of them (None: the target is not this machine's GPUs)."""
        target = self.target
        if target is None or not target.gpu_indices:
            return None
        positions = getattr(row.source, "gpu_positions", ()) or ()
        if target.gpu_set is not None and positions:
            return tuple(positions)
        return tuple(range(len(target.gpu_indices)))

    def plan_gpu_indices(self, row: PlanRow) -> tuple[int, ...]:
        """NVML indices of the GPUs a plan runs on (the selection unless the plan is one card
        of a set)."""
        positions = self._plan_positions(row)
        if self.target is None or positions is None:
            return ()
        return tuple(self.target.gpu_indices[i] for i in positions)

    def gpu_overrides(self, row: PlanRow) -> dict[str, object]:
        """The launch's GPUs by UUID (the plan's cards of a set, else the selection) and the
        pipeline stages vLLM needs to be told about."""
        target = self.target
        positions = self._plan_positions(row)
        if target is None or positions is None or not target.uuids:
            return {}
        out: dict[str, object] = {
            "cuda_visible_devices": ",".join(target.uuids[i] for i in positions)
        }
        pp = row.inputs.pipeline_parallel_size if row.inputs is not None else 1
        if pp > 1:
            out["pipeline_parallel_size"] = pp  # spelled by command.build_argv_tail
        return out


class TargetController(Controller):
    """Base of the controllers that work for the window's GPU target (``gpus``) on the
    selected vLLM (``runtimes``): planning, searching, launching, the runs list."""

    def __init__(
        self, window: WindowWidgets, gpus: GpuController, runtimes: RuntimeController
    ) -> None:
        super().__init__(window)
        self.gpus = gpus
        self.runtimes = runtimes
