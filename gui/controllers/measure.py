""""Measure on this GPU": the selected plan's dry run with dummy weights, with progress and cancel.

The application layer's :func:`~kvpilot.core.app.measure.measure_plan` (the one ``kvpilot plan
--measure`` calls) runs on a thread of its own (it takes minutes); its phases arrive as the
bridge's ``measure_phase`` and a timer shows the elapsed time against the expected one. What
vLLM reported is stored under the plan's measurement key, so the re-plan that follows shows the
plan's terms as "measured" — in the window and in ``kvpilot plan`` alike.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer

from kvpilot.core.base.errors import MEASUREMENT_CANCELLED, KvpilotError, MeasurementError
from kvpilot.core.base.units import GiB
from kvpilot.gui import theme
from kvpilot.gui.controllers import Controller
from kvpilot.gui.services import LaunchRequest
from kvpilot.gui.workers import run_in_thread

if TYPE_CHECKING:
    from kvpilot.core.fit.measurements import Measured
    from kvpilot.gui.controllers.planner import PlannerController
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.records import PlanRow
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

#: how often the progress line is redrawn while a dry run runs (ms)
TICK_MS = 500


class MeasureController(Controller):
    """Runs one dry run at a time; ``running`` is True from the click until it has ended."""

    def __init__(
        self, window: WindowWidgets, runtimes: RuntimeController, plans: PlannerController
    ) -> None:
        super().__init__(window)
        self.runtimes = runtimes
        self.plans = plans
        self.cancel_event: threading.Event | None = None
        self.phase = ""
        self.started_s = 0.0
        self.expected_s: tuple[float, float, str] = (0.0, 0.0, "")
        self.title = ""
        self.timer = QTimer(window)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self._tick)
        #: the last dry run's result (None: none finished, or it failed)
        self.last_measured: Measured | None = None

    @property
    def running(self) -> bool:
        return self.cancel_event is not None

    def measure(self, row: PlanRow) -> bool:
        """Start the dry run of ``row``; False (with the reason shown) when it cannot start."""
        runtime = self.runtimes.runtime
        if row.inputs is None:
            return False
        if runtime is None:
            self.say("Measuring needs vLLM: install it first (the bar above the planner)", 10_000)
            return False
        if self.running:
            self.say("a dry run is already running", 5000)
            return False
        if self.services.server_running():
            self.say("stop the running server first: the dry run needs the GPU's memory", 10_000)
            return False
        inputs = row.inputs
        if self.services.plan_overrides:
            from kvpilot.core.app.launch_settings import with_settings

            inputs = with_settings(inputs, self.services.plan_overrides)
        request = LaunchRequest(inputs=inputs, model=row.model_ref, profile=self.window.profile)
        self.expected_s = self.services.expected_dry_run_s(inputs)
        cancel = self.cancel_event = threading.Event()
        self.phase = ""
        self.title = row.title
        self.started_s = time.monotonic()
        self.last_measured = None
        self._tick()
        self.timer.start()
        run_in_thread(
            lambda: self.services.measure_plan(runtime, request, cancel),
            self._done,
            self._failed,
            name="kvpilot-measure",
        )
        return True

    def cancel(self) -> None:
        """Stop the dry run (its server is stopped; nothing is stored)."""
        if self.cancel_event is not None:
            self.cancel_event.set()
            self.window.planner.measure_cancel.setEnabled(False)
            self.window.planner.measure_text.setText("cancelling: stopping vLLM…")

    def on_phase(self, words: str) -> None:
        """The dry run reached a start-up phase (its words): shown with the elapsed time."""
        self.phase = words
        self._tick()

    def _tick(self) -> None:
        if not self.running:
            return
        elapsed = time.monotonic() - self.started_s
        low, high, basis = self.expected_s
        expected = f"{low:.0f} s" if high <= low * 1.3 else f"{low:.0f}-{high:.0f} s"
        phase = f"{self.phase}, " if self.phase else ""
        self.window.planner.show_measuring(
            f"Measuring {self.title} on this GPU with dummy weights: {phase}{elapsed:.0f} s "
            f"of about {expected} ({basis})",
            elapsed / high if high > 0 else None,
        )

    def _end(self) -> None:
        self.timer.stop()
        self.cancel_event = None

    def _done(self, measured: Measured) -> None:
        self._end()
        self.last_measured = measured
        took = f" in {measured.startup_s:.0f} s" if measured.startup_s else ""
        kv = measured.available_kv_bytes
        tokens = measured.kv_cache_tokens
        self.window.planner.measuring_done(
            f"Measured{took}: {kv / GiB:.2f} GiB of KV cache, {tokens or 0:,} tokens; the plan "
            "now shows vLLM's numbers (\"measured\")" if kv is not None else
            f"Measured{took}; vLLM reported no KV cache size",
            theme.OK,
        )
        self.plans.replan()

    def _failed(self, exc: BaseException) -> None:
        self._end()
        if isinstance(exc, MeasurementError) and exc.kind == MEASUREMENT_CANCELLED:
            self.window.planner.measuring_done("Dry run cancelled; nothing was stored")
            return
        message = exc.message if isinstance(exc, KvpilotError) else f"the dry run failed: {exc}"
        self.window.planner.measuring_done(message, theme.FAIL)
        self.say(message, 15_000)
