"""Recommend: ranked deployments for a device and a goal, for ``kvpilot recommend`` and the
window's planner alike.

:func:`rank` is the one use case both faces call. It looks the model up one way
(:func:`models_for`: a local model folder or a Hub repo id ranks that model, a catalog id or a
part of catalog ids filters the catalog, nothing ranks the whole catalog), plans with the
utilization the application layer chooses
(:func:`~kvpilot.core.app.launch_settings.planned_settings`) and the measurements of this
machine, and returns one ordered list: the plans that fit (best first), then the borderline ones
(vLLM may or may not start them), then the rest, each with the recommender's reason. The command
line prints it and the window draws it; neither orders, words or looks up anything itself.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvpilot.core.app.launch_settings import UtilizationChoice, planned_settings
from kvpilot.core.base.errors import KvpilotError, SettingsError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import (
    VERDICT_BORDERLINE,
    Capacity,
    GpuTarget,
    PlanInputs,
    ServingSettings,
)
from kvpilot.core.base.versions import release_number
from kvpilot.core.fit.calibrate import planned_capacity
from kvpilot.core.fit.measurements import MeasurementStore
from kvpilot.core.fit.recommend import (
    Candidate,
    Recommendation,
    Rejection,
    is_tight,
    kv_headroom_bytes,
    recommend,
    target_of,
    why_above,
)
from kvpilot.core.hardware.target import DeviceTarget


@dataclass(frozen=True)
class RecommendRequest:
    """What to rank.

    ``fixed`` holds the serving settings the user (or the backend) fixed: every field that
    differs from a default :class:`ServingSettings` is kept in every plan. ``model_ref`` is a
    local model folder, a Hub repo id, a catalog id or a part of catalog ids ("" = the whole
    catalog); ``catalog`` the checkpoints to rank instead of kvpilot's bundled catalog.
    ``limit`` keeps that many plans that fit (None: all). ``measurements`` is this machine's
    ``measurements.json`` (None: predictions only).
    """

    device: DeviceTarget
    goal: Goal
    fixed: ServingSettings = field(default_factory=ServingSettings)
    model_ref: str = ""
    limit: int | None = None
    measurements: Path | None = None
    catalog: tuple[ModelSpec, ...] | None = None


@dataclass(frozen=True)
class RankedPlan:
    """One entry of the ranked list.

    ``inputs``/``capacity`` are None for a checkpoint that does not fit at all; ``fits`` means
    vLLM starts it and serves at least one full-context request; ``borderline`` that vLLM may or
    may not start it (the user may try); ``tight`` that it fits with little KV headroom for the
    goal's users, ``kv_headroom_bytes`` (bytes, negative when short; None for a plan that does
    not fit) the KV left over that rule judges. ``candidate`` or ``rejection`` is the
    recommender's own record; ``model_ref`` is what vLLM is given (the repo id, or the local
    folder or Hub id the request named).
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
    model_ref: str = ""

    @property
    def launchable(self) -> bool:
        """A plan that fits, or a borderline one."""
        return self.inputs is not None and (self.fits or self.borderline)


@dataclass(frozen=True)
class Ranking:
    """The answer: the per-GPU target ranked on, the goal as planned (its release normalised),
    the plans in their one order, the utilization choice (its sentence is shown once), the
    recommender's record and, when this machine's measurements could not be read, why (the
    plans are then predictions only)."""

    gpu: GpuTarget
    goal: Goal
    plans: tuple[RankedPlan, ...]
    choice: UtilizationChoice
    recommendation: Recommendation
    measurements_problem: str = ""

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        """The recommender's candidates, in the list's order."""
        return tuple(p.candidate for p in self.plans if p.candidate is not None)

    @property
    def rejected(self) -> tuple[Rejection, ...]:
        """The checkpoints that do not serve the goal, in the list's order (borderline first)."""
        return tuple(p.rejection for p in self.plans if p.rejection is not None)


def models_for(
    ref: str, catalog_specs: Sequence[ModelSpec] | None = None
) -> tuple[tuple[ModelSpec, ...] | None, str | None]:
    """How a model reference is looked up: ``(models, catalog_filter)``; ``models`` None means
    the catalog (``catalog_specs``, default kvpilot's own) filtered by ``catalog_filter``.

    An existing folder is read as a model folder (its ``config.json``); a catalog id, or text
    that is part of some catalog checkpoint's id, filters the catalog; anything else is loaded
    as a Hub repo id (from the Hugging Face cache). ``""`` ranks the whole catalog.

    Raises:
        ModelSpecError: a folder without ``config.json``, or an id found nowhere (the sentence
            says where kvpilot looked and what to give instead).
    """
    from kvpilot.core.hub.resolve import load_model_spec
    from kvpilot.core.models import catalog

    ref = ref.strip()
    if not ref:
        return None, None
    if _is_folder(ref):
        return (load_model_spec(ref),), None
    if catalog_specs is None:
        ids = [spec.model_id for spec in catalog.all_checkpoint_specs()]
        ids += [repo for repo, _ in catalog.unplannable()]
        if catalog.find(ref) is not None:
            return None, ref
    else:
        ids = [spec.model_id for spec in catalog_specs]
    if any(ref.lower() in model_id.lower() for model_id in ids):
        return None, ref
    return (load_model_spec(ref),), None


def _is_folder(ref: str) -> bool:
    try:
        return Path(ref).expanduser().is_dir()
    except (OSError, RuntimeError):  # a name too long, a home folder nobody has
        return False


#: held while the catalog and the quality figures are read, so that a :func:`rank` started
#: during :func:`warm` waits for that reading instead of doing it a second time beside it
_reading = threading.Lock()


def _read_catalog() -> None:
    """Read (once per process, cached where they are kept) the catalog's checkpoint specs,
    the checkpoints it cannot plan and the quality figures.

    Raises:
        ModelSpecError: the catalog or the quality table cannot be read.
    """
    from kvpilot.core.hub import resolve  # noqa: F401 - what models_for imports on first use
    from kvpilot.core.models import catalog
    from kvpilot.core.models.quality import quality_table

    with _reading:
        catalog.all_checkpoint_specs()
        catalog.unplannable()
        quality_table()


def warm() -> None:
    """Do ahead what the first :func:`rank` of the catalog would do first: import what it
    imports on first use and read the catalog and the quality figures. The window runs this on
    a pool thread as it starts, beside the GPU probe, so that its first ranked plans wait only
    for the planning. A catalog that cannot be read is left for :func:`rank` to say."""
    try:
        _read_catalog()
    except KvpilotError:
        return


def rank(request: RecommendRequest) -> Ranking:
    """Rank deployments for ``request`` (see the module docstring).

    Raises:
        FitError: the goal or the device is not usable.
        ModelSpecError: the model reference cannot be read (see :func:`models_for`).
    """
    ref = request.model_ref.strip()
    if request.catalog is None and not (ref and _is_folder(ref)):
        _read_catalog()  # after warm(), or beside it: the catalog is read once
    device = request.device
    models, catalog_filter = models_for(request.model_ref, request.catalog)
    # a model named outside the catalog is launched as it was named (its folder, its Hub id)
    named_ref = request.model_ref.strip() if models is not None else ""
    if models is None and request.catalog is not None:
        models = tuple(request.catalog)
    version = release_number(request.goal.vllm_version)
    goal = replace(request.goal, model_filter=catalog_filter, vllm_version=version)
    fixed, choice = planned_settings(device, request.fixed, request.goal.vllm_version)
    gpu_set = device.gpu_set
    gpu = target_of(gpu_set.cards) if gpu_set is not None else device.card()
    store, problem = _store(request.measurements)
    result = recommend(
        gpu, goal, models, fixed=fixed, gpu_set=gpu_set,
        capacity_of=lambda inputs: planned_capacity(inputs, store),
    )
    plans = _ordered(result, named_ref)
    if request.limit is not None:
        fitting = [p for p in plans if p.candidate is not None][:request.limit]
        plans = fitting + [p for p in plans if p.candidate is None]
    return Ranking(gpu, goal, tuple(plans), choice, result, problem)


def _store(path: Path | None) -> tuple[MeasurementStore | None, str]:
    """The measurements at ``path`` and ``""``; or None and why they cannot be read."""
    if path is None:
        return None, ""
    store = MeasurementStore(path)
    try:
        store.all()
    except SettingsError as exc:
        return None, f"planned without this machine's measurements: {exc.message}"
    return store, ""


def _ordered(result: Recommendation, model_ref: str) -> list[RankedPlan]:
    """The recommendation as one list: fits, borderline, does not fit (the recommender's order
    within each)."""
    users = result.goal.users
    plans: list[RankedPlan] = []
    for cand in result.candidates:
        cap = cand.capacity
        fits = cap.fits and cap.max_concurrency >= 1
        plans.append(RankedPlan(
            model_id=cand.model_id, inputs=cand.inputs, capacity=cap, fits=fits,
            borderline=not fits and cap.verdict == VERDICT_BORDERLINE,
            tight=is_tight(cap, users), reason=cand.reason, candidate=cand,
            kv_headroom_bytes=kv_headroom_bytes(cap, users),
            model_ref=model_ref or cand.model_id,
        ))
    for rej in result.rejected:
        plan = rej.borderline
        plans.append(RankedPlan(
            model_id=rej.model_id,
            inputs=plan[0] if plan is not None else None,
            capacity=plan[1] if plan is not None else None,
            fits=False,
            borderline=plan is not None and plan[1].verdict == VERDICT_BORDERLINE,
            tight=False, reason=rej.reason, rejection=rej, model_ref=model_ref or rej.model_id,
        ))
    plans.sort(key=lambda p: 0 if p.fits else 1 if p.borderline else 2)  # stable
    return plans


def quality_notes(plan: object, below: object = None) -> list[tuple[str, str]]:
    """(label, text) lines for a ranked plan: its published quality figure with its source, and
    why it ranks above ``below``, the next plan (:func:`kvpilot.core.fit.recommend.why_above`);
    [] for a plan the recommender did not rank (``plan`` not a :class:`Candidate`)."""
    if not isinstance(plan, Candidate):
        return []
    q = plan.quality
    figure = (f"{q.score:.1f} on {q.benchmark} ({q.date or 'date not given'}): {q.source}"
              if q.rated else f"unrated: {q.source}")
    if q.recovery_note:
        figure += f"; {q.recovery_note}"
    lines = [("quality", figure)]
    if isinstance(below, Candidate):
        lines.append(("ranked above the next", why_above(plan, below)))
    return lines
