"""Re-planning with the settings the user fixed: the planner's list of plans, decided here.

The recommender (:func:`kvpilot.core.fit.recommend.recommend`) chooses the KV dtype and the
utilization itself; a user interface lets the user fix some settings (a KV dtype, a utilization,
eager mode, a KV size the backend needs). :func:`fixed_settings` turns those choices into the
:class:`~kvpilot.core.base.plan.ServingSettings` the recommender keeps in every plan, and
:func:`replan` runs it and returns one ordered list: the plans that fit, then the borderline ones
(vLLM may or may not start them), then the rest, each with its verdict, the one "tight" rule
(:func:`~kvpilot.core.fit.recommend.is_tight`) and the reason to show.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.plan import (
    VERDICT_BORDERLINE,
    Capacity,
    GpuTarget,
    PlanInputs,
    ServingSettings,
    serving_field_names,
)
from kvpilot.core.base.words import counted, times_text
from kvpilot.core.fit.budget import borderline_note, compute_capacity
from kvpilot.core.fit.recommend import (
    Candidate,
    CapacityOf,
    Goal,
    Recommendation,
    Rejection,
    is_tight,
    kv_headroom_bytes,
    recommend,
)

if TYPE_CHECKING:
    from kvpilot.core.base.model_spec import ModelSpec
    from kvpilot.core.fit.parallel import GpuSet


def fixed_settings(
    *,
    kv_cache_dtype: str = "auto",
    gpu_memory_utilization: float | None = None,
    enforce_eager: bool = False,
    overrides: Mapping[str, object] | None = None,
) -> ServingSettings:
    """The serving settings the user fixed; ``"auto"``/None/False leave the choice to the
    recommender. ``overrides`` (ServingSettings field -> value) are applied last.

    Raises:
        TypeError: an override that is not a ServingSettings field.
    """
    fixed: dict[str, Any] = {}
    if kv_cache_dtype != "auto":
        fixed["kv_cache_dtype"] = kv_cache_dtype
    if gpu_memory_utilization is not None:
        fixed["gpu_memory_utilization"] = gpu_memory_utilization
    if enforce_eager:
        fixed["enforce_eager"] = True
    fixed.update(overrides or {})
    return ServingSettings(**fixed)


def with_settings(inputs: PlanInputs, overrides: Mapping[str, object]) -> PlanInputs:
    """``inputs`` with the serving settings in ``overrides`` (field -> value) replaced.

    Raises:
        TypeError: a key that is not a :class:`ServingSettings` field.
    """
    unknown = sorted(set(overrides) - set(serving_field_names()))
    if unknown:
        raise TypeError(f"not serving settings: {', '.join(unknown)}")
    changes: dict[str, Any] = dict(overrides)
    return replace(inputs, **changes)


def user_fixed(settings: ServingSettings) -> bool:
    """True when ``settings`` fix anything (differ from "let the recommender choose")."""
    return bool(ServingSettings().settings_changes(settings))


@dataclass(frozen=True)
class RankedPlan:
    """One entry of the planner's list.

    ``inputs``/``capacity`` are None for a checkpoint that does not fit at all; ``fits`` means
    vLLM starts it and serves at least one full-context request; ``borderline`` that vLLM may or
    may not start it (the user may try); ``tight`` that it fits with little KV headroom for the
    goal's users, ``kv_headroom_bytes`` (bytes, negative when short; None for a plan that does
    not fit) the KV left over that rule judges. ``candidate`` or ``rejection`` is the
    recommender's own record.
    """

    model_id: str
    inputs: PlanInputs | None
    capacity: Capacity | None
    fits: bool
    borderline: bool
    tight: bool
    reason: str
    candidate: Candidate | None = None
    rejection: Rejection | None = None
    kv_headroom_bytes: int | None = None

    @property
    def launchable(self) -> bool:
        """A plan that fits, or a borderline one."""
        return self.inputs is not None and (self.fits or self.borderline)


def capacity_reason(cap: Capacity, users: int) -> str:
    """What a plan with fixed settings gives (or why it does not fit), in one line."""
    if not cap.fits:
        if cap.verdict == VERDICT_BORDERLINE:
            return borderline_note(cap)
        return cap.failure.message if cap.failure else "does not fit"
    return (
        f"{times_text(cap.max_concurrency)} {cap.max_model_len:,}-token requests "
        f"({cap.kv_cache_dtype} KV, utilization {cap.gpu_memory_utilization:.2f})"
        + ("" if cap.max_concurrency >= users else f"; {counted(users, 'user')} wanted")
    )


def ranked_plans(result: Recommendation, describe_fixed: bool = False) -> list[RankedPlan]:
    """The recommendation as one list: fits, borderline, does not fit (the recommender's order
    within each). ``describe_fixed``: the user fixed settings, so a candidate's reason
    describes its capacity under them rather than the recommender's choice."""
    users = result.goal.users
    plans: list[RankedPlan] = []
    for cand in result.candidates:
        cap = cand.capacity
        fits = cap.fits and cap.max_concurrency >= 1
        plans.append(
            RankedPlan(
                model_id=cand.model_id,
                inputs=cand.inputs,
                capacity=cap,
                fits=fits,
                borderline=not fits and cap.verdict == VERDICT_BORDERLINE,
                tight=is_tight(cap, users),
                reason=capacity_reason(cap, users) if describe_fixed else cand.reason,
                candidate=cand,
                kv_headroom_bytes=kv_headroom_bytes(cap, users),
            )
        )
    for rej in result.rejected:
        plan = rej.borderline
        plans.append(
            RankedPlan(
                model_id=rej.model_id,
                inputs=plan[0] if plan is not None else None,
                capacity=plan[1] if plan is not None else None,
                fits=False,
                borderline=plan is not None and plan[1].verdict == VERDICT_BORDERLINE,
                tight=False,
                reason=rej.reason,
                rejection=rej,
            )
        )
    plans.sort(key=lambda p: 0 if p.fits else 1 if p.borderline else 2)  # stable
    return plans


def replan(
    gpu: GpuTarget,
    goal: Goal,
    models: Sequence[ModelSpec] | None = None,
    *,
    fixed: ServingSettings | None = None,
    capacity_of: CapacityOf = compute_capacity,
    gpu_set: GpuSet | None = None,
    describe_fixed: bool | None = None,
) -> tuple[Recommendation, list[RankedPlan]]:
    """Recommend for ``goal`` on ``gpu`` keeping the ``fixed`` settings in every plan; returns
    the recommendation and its :func:`ranked_plans`. ``describe_fixed`` (default: whether
    ``fixed`` fixes anything) makes the reasons describe each capacity under those settings;
    settings a backend requires rather than the user chose may pass False.

    Raises:
        FitError: the goal or the GPU is not usable (see :func:`recommend`).
    """
    result = recommend(gpu, goal, models, fixed=fixed, capacity_of=capacity_of, gpu_set=gpu_set)
    if describe_fixed is None:
        describe_fixed = fixed is not None and user_fixed(fixed)
    return result, ranked_plans(result, describe_fixed)
