"""Planning: the goal to ranked plans, the selected plan's chart, its command or export.

Every goal edit (debounced by the panel), GPU choice and vLLM found re-plans on the pool; each
request has a generation number and answers of an older one are dropped. Selecting a plan draws
it in the memory bar and asks the fit engine what else fits (the context x users chart).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFileDialog

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.words import counted
from kvpilot.gui import theme
from kvpilot.gui.controllers.gpus import TargetController
from kvpilot.gui.panels.planner_panel import CHART_CONTEXTS

if TYPE_CHECKING:
    from kvpilot.core.base.goal import Goal
    from kvpilot.gui.controllers.gpus import GpuController
    from kvpilot.gui.controllers.profiles import ProfileController
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.records import PlanRequest, PlanResult, PlanRow
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

log = logging.getLogger("kvpilot.gui")

EXPORT_LABELS = {"command": "vllm serve command", "docker": "docker run command",
                 "compose": "Compose file", "helm": "Helm values"}


class PlannerController(TargetController):
    """Asks for plans and shows them; ``plan_generation`` numbers the requests."""

    def __init__(
        self,
        window: WindowWidgets,
        gpus: GpuController,
        runtimes: RuntimeController,
        profiles: ProfileController,
    ) -> None:
        super().__init__(window, gpus, runtimes)
        self.profiles = profiles
        self.plan_generation = 0

    def on_goal_changed(self, request: PlanRequest) -> None:
        self.profiles.remember_goal(request)
        self.replan()

    def replan(self) -> None:
        """Ask the fit engine for ranked plans (pool); stale answers are dropped."""
        window = self.window
        target = self.gpus.target
        if target is None:
            return
        request = window.planner.request()
        runtime = self.runtimes.runtime
        if runtime is not None:
            request = replace(request, goal=replace(request.goal, vllm_version=runtime.version))
        self.plan_generation += 1
        gen = self.plan_generation
        window.planner.set_status("planning…")
        self.in_pool(
            lambda: self.services.plan(target, request),
            lambda res: self._on_plans(gen, res, request.goal.context_tokens),
            lambda exc: self._on_plan_error(gen, exc),
        )

    def _on_plans(self, gen: int, result: PlanResult, context_tokens: int | None = None) -> None:
        if gen != self.plan_generation:
            return
        fits = sum(1 for r in result.rows if r.fits)
        text = (f"{counted(fits, 'plan')} fit, {len(result.rows) - fits} do not" if result.rows
                else "no plans")
        short = short_context_note(result, context_tokens)
        self.window.planner.set_status(
            text + (f"; {short}" if short else ""),
            theme.OK if fits and not short else (theme.TIGHT if fits else theme.FAIL),
        )
        self.window.planner.set_plans(result.rows, result.heading)

    def _on_plan_error(self, gen: int, exc: BaseException) -> None:
        if gen != self.plan_generation:
            return
        message = exc.message if isinstance(exc, KvpilotError) else f"planning failed: {exc}"
        if not isinstance(exc, KvpilotError):
            log.error("planning failed", exc_info=exc)
        self.window.planner.set_status(message, theme.FAIL)
        self.window.planner.set_plans([], "No plans")

    def on_plan_selected(self, row: PlanRow | None) -> None:
        window = self.window
        window.gpu_panel.set_plan(row.capacity if row is not None and row.launchable else None)
        window.server_panel.set_plan_missing(launch_missing(row))
        if row is None or row.inputs is None:
            window.planner.clear_feasibility("select a plan to see what else fits")
            return
        inputs = row.inputs
        goal = window.planner.request().goal
        gen = self.plan_generation
        self.in_pool(
            lambda: self.services.feasibility(inputs, CHART_CONTEXTS),
            lambda res: self._on_feasibility(gen, row, goal, res),
        )

    def _on_feasibility(
        self, gen: int, row: PlanRow, goal: Goal, by_dtype: dict[str, list[float]]
    ) -> None:
        if gen != self.plan_generation or self.window.planner.selected() is not row:
            return
        util = row.capacity.gpu_memory_utilization if row.capacity else None
        note = f"{row.title}, utilization {util:.2f}" if util else row.title
        self.window.planner.set_feasibility(CHART_CONTEXTS, by_dtype, goal, note)

    def copy_command(self) -> str | None:
        """Copy the selected plan's exact ``vllm serve`` command to the clipboard."""
        row = self.window.planner.selected()
        if row is None or row.inputs is None:
            return None
        try:
            text = self.services.launch_command_text(
                row.inputs, row.model_ref, self.window.profile
            )
        except KvpilotError as exc:
            self.say(exc.message, 10_000)
            return None
        QGuiApplication.clipboard().setText(text)
        self.say("vllm serve command copied", 5000)
        return text

    def export_plan(self, fmt: str) -> str | None:
        """Copy the selected plan as ``fmt`` (command, docker, compose, helm) to the clipboard."""
        row = self.window.planner.selected()
        if row is None or row.inputs is None:
            return None
        try:
            pinned = self.gpus.gpu_overrides(row).get("cuda_visible_devices")
            gpu_ids = tuple(pinned.split(",")) if isinstance(pinned, str) and pinned else ()
            text = self.services.export_text(
                row.inputs, row.model_ref, self.window.profile, fmt, gpu_ids=gpu_ids
            )
        except KvpilotError as exc:
            self.say(exc.message, 10_000)
            return None
        QGuiApplication.clipboard().setText(text)
        self.say(f"{EXPORT_LABELS.get(fmt, fmt)} copied", 5000)
        return text

    def browse_model(self) -> None:
        """Pick a local model directory for the goal."""
        path = QFileDialog.getExistingDirectory(
            self.window, "A model directory (with config.json)"
        )
        if path:
            self.window.planner.set_model_ref(path)


def launch_missing(row: PlanRow | None) -> str | None:
    """Why Launch cannot start ``row`` (None: it can): no plan selected, or one that does not
    fit."""
    if row is None or row.inputs is None:
        return ("no plan to launch: select one in the table (when none fits, lower the context, "
                "the users or the quality floor)")
    if not row.launchable:
        return f"{row.title} does not fit: {row.reason}"
    return None


def short_context_note(result: PlanResult, context_tokens: int | None) -> str:
    """What the planner says when plans stop below the context asked for (their model's
    maximum is lower): how many, and the longest they reach. ``""`` when none does."""
    if not context_tokens:
        return ""
    short = [r.inputs.max_model_len for r in result.rows
             if r.inputs is not None and r.inputs.max_model_len is not None
             and r.inputs.max_model_len < context_tokens]
    if not short:
        return ""
    every = len(short) == len([r for r in result.rows if r.inputs is not None])
    who = "every plan stops" if every else (
        f"{counted(len(short), 'plan')} {'stops' if len(short) == 1 else 'stop'}")
    return (f"{who} short of the {context_tokens:,}-token context asked for, at its model's "
            f"maximum (at most {max(short):,} tokens)")
