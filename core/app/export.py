"""Export a plan for another place (``vllm serve`` command, ``docker run``, Compose, Helm): one
function for ``kvpilot export`` and the window's export menu.

Both faces get the same text for the same plan: the capacity noted in the header is the one the
planner shows (calibrated by this machine's measurements), the measured figures are those stored
under the plan's key, and the pipeline size comes from the plan. A plan predicted not to start
is not exported unless the caller forces it; the reason is the plan's own failure sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kvpilot.core.base.plan import Capacity, PlanInputs, Verdict
from kvpilot.core.fit.calibrate import key_for, planned_capacity
from kvpilot.core.vllm.export import build_export_plan, render

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvpilot.core.fit.measurements import MeasurementStore
    from kvpilot.core.vllm.command import LaunchSpec


@dataclass(frozen=True)
class Export:
    """One export: ``text`` in the asked format, the ``capacity`` noted in it (None without a
    device to plan for) and, for a plan predicted not to start, ``refusal``: one sentence with
    the reason (``text`` is then empty unless the export was forced)."""

    text: str
    capacity: Capacity | None
    refusal: str = ""

    @property
    def fits(self) -> bool:
        """False when the plan is predicted not to start (borderline counts as not sure)."""
        return self.capacity is None or self.capacity.verdict is not Verdict.DOES_NOT_FIT


def refusal_of(capacity: Capacity) -> str:
    """The sentence that refuses to export a plan that does not fit ("" when it fits)."""
    if capacity.verdict is not Verdict.DOES_NOT_FIT:
        return ""
    reason = capacity.failure.message if capacity.failure is not None else "it does not fit"
    return f"this plan is predicted not to start: {reason.rstrip('.')}."


def export_plan(
    spec: LaunchSpec,
    inputs: PlanInputs | None,
    fmt: str,
    *,
    store: MeasurementStore | None = None,
    revision: str | None = None,
    gpu_ids: Sequence[str] = (),
    weights_bytes: int | None = None,
    force: bool = False,
) -> Export:
    """``spec`` (built from ``inputs`` when there is a plan) as ``fmt``.

    ``store`` holds this machine's measurements; ``gpu_ids`` pins GPUs by UUID; ``weights_bytes``
    sizes the checkpoint when there is no plan. ``force`` renders a plan that does not fit
    (the refusal is still returned, for a warning).

    Raises:
        CommandError: an unknown format, or a spec that cannot become a command.
    """
    capacity = planned_capacity(inputs, store) if inputs is not None else None
    measured = store.lookup(key_for(inputs)) if store is not None and inputs is not None \
        else None
    refusal = refusal_of(capacity) if capacity is not None else ""
    if refusal and not force:
        return Export("", capacity, refusal)
    plan = build_export_plan(
        spec, inputs, capacity=capacity, measured=measured, revision=revision, gpu_ids=gpu_ids,
        pipeline_parallel_size=inputs.pipeline_parallel_size if inputs is not None else 1,
    )
    if inputs is None and weights_bytes is not None:
        plan = replace(plan, weights_bytes=weights_bytes)
    return Export(render(plan, fmt), capacity, refusal)
