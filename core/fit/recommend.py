"""Rank complete deployments for a GPU and a goal.

A deployment is checkpoint x max_model_len x max_num_seqs x KV dtype x gpu_memory_utilization.
For each checkpoint of the catalog (and any extra model the caller passes), the recommender
derives the utilization from the free memory (not a constant), tries the wanted context with
16-bit and, where the GPU supports it, FP8 KV, and keeps the configuration that serves the goal
with the most headroom. Every candidate carries its predicted capacity, a decode-speed and TTFT
estimate, and a one-line reason; rejected ones carry why.

Speed estimates are first-order: decode is memory-bound (bytes read per token over bandwidth),
prefill compute-bound (2 x active parameters per token over dense BF16 throughput). They rank
candidates; they are not benchmarks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.model_spec import SOURCE_ESTIMATE, ModelSpec
from kvpilot.core.base.plan import (
    CPU_DEVICE_NAME,
    USE_CASES,
    VERDICT_BORDERLINE,
    Capacity,
    GpuTarget,
    PlanInputs,
    ServingSettings,
)
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import supports
from kvpilot.core.base.words import estimated_rate, join_clauses, more_kv_text, times_text
from kvpilot.core.fit import budget, extensible_kv, parallel
from kvpilot.core.fit.borderline import borderline_note
from kvpilot.core.fit.support import check_support, fp8_kv_supported
from kvpilot.core.models.quality import QualityFigure, base_of, figure_for, unrated

#: fraction of peak bandwidth / compute a single stream reaches in practice
DECODE_BANDWIDTH_EFFICIENCY = 0.75
PREFILL_COMPUTE_EFFICIENCY = 0.45
#: typical prompt per use case (tokens) for the TTFT estimate
TYPICAL_PROMPT_TOKENS = {"chat": 1000, "long-docs": 16000, "batch": 2000, "coding": 8000}
#: a rated plan's quality points: this plus its published figure (0-100 scales), so that every
#: rated plan ranks above every unrated one (whose fallback stays below it)
RATED_BASE = 100.0
#: the unrated fallback: this many points per decade of (effective) parameters
FALLBACK_PER_DECADE = 5.0
#: utilization when the free memory is unknown: leave room for a desktop
UNKNOWN_FREE_UTILIZATION = 0.90
MAX_UTILIZATION = 0.95
#: headroom below which a plan is flagged "tight" (GUI: amber)
TIGHT_HEADROOM_BYTES = 1 * GiB


@dataclass(frozen=True)
class Candidate:
    """One ranked deployment."""

    model_id: str
    quantization: str | None
    weight_bits: int
    params_total: int
    params_active: int
    inputs: PlanInputs
    capacity: Capacity
    decode_tokens_per_s: float | None
    ttft_s: float | None
    score: float
    reason: str
    tight: bool
    kv_headroom_bytes: int
    #: several GPUs: the cards used (positions in the GpuSet), their label and the layout note
    gpu_positions: tuple[int, ...] = ()
    gpus_label: str = ""
    parallel_note: str = ""
    #: the published figure the score ranks by (or "unrated"), with its source and date
    quality: QualityFigure = field(default_factory=lambda: unrated("not looked up"))
    #: the model this checkpoint is an upload of (its catalog entry; itself outside the catalog)
    base_model: str = ""
    #: the checkpoint's byte size is the byte model's estimate (no published size was read)
    size_estimated: bool = False
    #: a better plan of the same model ranks above it (:func:`ranked_order`)
    repeat_of_model: bool = False


@dataclass(frozen=True)
class Rejection:
    """A checkpoint that does not serve the goal, and why.

    ``borderline`` is the plan when its verdict was "borderline" (vLLM may or may not start
    it; the measured dry run settles it), so that a user interface can still offer it.
    """

    model_id: str
    reason: str
    shortfall_bytes: int | None = None
    borderline: tuple[PlanInputs, Capacity] | None = None


@dataclass(frozen=True)
class Recommendation:
    gpu: GpuTarget
    goal: Goal
    candidates: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...] = field(default_factory=tuple)


def utilization_for(gpu: GpuTarget, vllm_version: str | None = None) -> float | None:
    """The utilization to plan with: the most that passes the start-up check, capped.

    From vLLM 0.34 (the extensible KV cache) there is no start-up check: a GPU that drives a
    display or is shared gets :func:`kvpilot.core.fit.extensible_kv.launch_cap`'s cap, a GPU
    nothing else uses None (vLLM's own default, 1.0).
    """
    if vllm_version is not None and supports("extensible_kv_cache", vllm_version) \
            and gpu.name.lower() != CPU_DEVICE_NAME:
        return extensible_kv.launch_cap(
            vllm_version=vllm_version, total_bytes=gpu.total_bytes,
            free_now_bytes=gpu.free_bytes, drives_display=gpu.drives_display,
            holders=gpu.memory_holders).gpu_memory_utilization
    if gpu.free_bytes is None:
        return UNKNOWN_FREE_UTILIZATION
    return min(MAX_UTILIZATION, budget.max_passing_utilization(gpu.total_bytes, gpu.free_bytes))


#: bits per weight of an unquantized checkpoint, by its ``torch_dtype``
_DTYPE_BITS = {"float32": 32, "float": 32, "float64": 64, "float16": 16, "half": 16,
               "bfloat16": 16, "float8_e4m3fn": 8, "float8_e5m2": 8}


def weight_bits_of(model: ModelSpec) -> int:
    """Bits per weight as the checkpoint holds them: the quantization's, else its dtype's (a
    float32 checkpoint is 32-bit; 16 where the dtype is unknown)."""
    if model.quantization and model.quantization.bits:
        return model.quantization.bits
    return _DTYPE_BITS.get(str(model.torch_dtype).removeprefix("torch."), 16)


def _params(model: ModelSpec) -> tuple[int, int]:
    """(total, active per token) parameter counts, from the architecture."""
    from kvpilot.core.models.bytemodel import param_breakdown

    breakdown = param_breakdown(model)
    frac = 1.0
    if model.moe is not None and model.moe.num_experts:
        frac = model.moe.num_experts_per_tok / model.moe.num_experts
    return breakdown.total_params, breakdown.active_params(frac)


def decode_tokens_per_s(
    capacity: Capacity, gpu: GpuTarget, context_tokens: int, active_frac: float
) -> float | None:
    """Single-stream decode speed: bytes read per token over effective bandwidth."""
    if not gpu.bandwidth_bytes_per_s:
        return None
    weights_read = capacity.weights_bytes * active_frac
    kv_read = capacity.kv_bytes_per_token * context_tokens / 2  # on average half the context
    per_token = weights_read + kv_read
    return gpu.bandwidth_bytes_per_s * DECODE_BANDWIDTH_EFFICIENCY / per_token


def ttft_seconds(params_active: int, prompt_tokens: int, gpu: GpuTarget) -> float | None:
    """Prefill time of one prompt: 2 x active params FLOPs per token over dense BF16 TFLOPS."""
    if not gpu.bf16_dense_tflops:
        return None
    flops = 2.0 * params_active * prompt_tokens
    return flops / (gpu.bf16_dense_tflops * 1e12 * PREFILL_COMPUTE_EFFICIENCY)


def _quality(params_total: int, bits: int) -> float:
    quant_factor = 1.0 if bits >= 16 else {8: 0.995, 4: 0.98}.get(bits, 0.95)
    return math.log10(max(params_total, 1)) * quant_factor


#: the capacity of a plan: the model's prediction, or that replaced by measurements
CapacityOf = Callable[[PlanInputs], Capacity]


def _plan_one(
    model: ModelSpec, gpu: GpuTarget, goal: Goal, kv_dtype: str, util: float | None,
    fixed: ServingSettings | None, capacity_of: CapacityOf, layout: parallel.Layout | None = None,
) -> tuple[PlanInputs, Capacity]:
    context = min(goal.context_tokens, model.derived_max_model_len)
    seqs = max(1, goal.users if goal.use_case != "batch" else max(goal.users, 16))
    inputs = PlanInputs.on_gpu(
        model,
        gpu,
        gpu_memory_utilization=util,
        max_model_len=context,
        max_num_seqs=seqs,
        kv_cache_dtype=kv_dtype,
        vllm_version=goal.vllm_version,
    )
    if fixed is not None:
        inputs = replace(inputs, **_fixed_changes(fixed))
        if fixed.speculative_config:
            from kvpilot.core.hub.draft import draft_spec

            inputs = replace(inputs, draft_model=draft_spec(fixed.speculative_config))
    if layout is not None and layout.world_size > 1:
        inputs = replace(
            inputs,
            tensor_parallel_size=layout.tensor_parallel_size,
            pipeline_parallel_size=layout.pipeline_parallel_size,
            gpu_allreduce=layout.allreduce,
        )
    return inputs, capacity_of(inputs)


def _fixed_changes(fixed: ServingSettings) -> dict[str, Any]:
    """The settings the user fixed: those that differ from "let the recommender choose"."""
    return ServingSettings().settings_changes(fixed)


def recommend(
    gpu: GpuTarget,
    goal: Goal,
    models: Sequence[ModelSpec] | None = None,
    *,
    limit: int | None = None,
    fixed: ServingSettings | None = None,
    capacity_of: CapacityOf = budget.compute_capacity,
    gpu_set: parallel.GpuSet | None = None,
) -> Recommendation:
    """Rank deployments of ``models`` (default: every catalog checkpoint) for ``gpu``/``goal``.

    ``fixed`` holds serving settings the user chose (every field that differs from a default
    :class:`ServingSettings` replaces the recommender's choice: a KV dtype, a utilization,
    eager mode...). ``capacity_of`` computes each candidate's capacity (default: the model;
    :func:`kvpilot.core.fit.calibrate.planned_capacity` with a store uses measurements).

    With a ``gpu_set`` of two or more cards each model is also planned over all of them
    (tensor parallel, or pipeline parallel where its heads do not divide) and on each card
    alone, the card that does not drive the display first; when one card is enough the
    parallel plan ranks below it. ``gpu`` is then only used without a set.
    """
    if goal.use_case not in USE_CASES:
        raise FitError(f"use case must be one of {', '.join(USE_CASES)}")
    candidates: list[Candidate] = []
    rejected: list[Rejection] = []
    if models is None:
        from kvpilot.core.models.catalog import all_checkpoint_specs, unplannable

        models = all_checkpoint_specs()
        rejected += [Rejection(repo, why) for repo, why in unplannable()
                     if not goal.model_filter or goal.model_filter.lower() in repo.lower()]
    multi = gpu_set is not None and len(gpu_set.cards) > 1
    for model in models:
        if goal.model_filter and goal.model_filter.lower() not in model.model_id.lower():
            continue
        bits = weight_bits_of(model)
        if bits < goal.min_weight_bits:
            rejected.append(
                Rejection(model.model_id, f"{bits}-bit weights are below the quality floor")
            )
            continue
        if not multi or gpu_set is None:
            found = _evaluate(model, gpu, goal, fixed, capacity_of)
            if isinstance(found, Candidate):
                candidates.append(found)
            else:
                rejected.append(found)
            continue
        one_card_enough = False
        last: Rejection | None = None
        for layout in parallel.layouts(model, gpu_set):
            cards = [gpu_set.cards[i] for i in layout.cards]
            found = _evaluate(model, target_of(cards), goal, fixed, capacity_of, layout)
            if isinstance(found, Rejection):
                last = replace(found, reason=f"{parallel.label_of(cards)}: {found.reason}")
                continue
            if layout.world_size == 1:
                if one_card_enough:
                    continue  # the best single card is enough; the others would repeat it
                one_card_enough = True
            elif one_card_enough:
                found = replace(found, score=round(found.score - 1.0, 4))  # one card serves it
            note = layout.note
            candidates.append(replace(
                found,
                gpu_positions=layout.cards,
                gpus_label=parallel.label_of(cards),
                parallel_note=note,
                reason=found.reason + (f"; {note}" if note else ""),
            ))
        if last is not None and not any(c.model_id == model.model_id for c in candidates):
            rejected.append(last)
    candidates = ranked_order(candidates)
    if limit is not None:
        candidates = candidates[:limit]
    return Recommendation(gpu, goal, tuple(candidates), tuple(rejected))


def ranked_order(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The order plans are shown in: rated plans before unrated ones; among the rated, those
    whose checkpoint size was published before those sized only by the byte model (the unrated
    already rank by the parameter-count fallback, so their sizes do not part them); in each of
    these tiers, every model's best plan (by score) before the other uploads of a model already
    shown (marked ``repeat_of_model``); then by score. So the first rows are distinct models
    whose quality and size are both sourced, and four uploads of one model do not fill them."""
    def tier(c: Candidate) -> tuple[bool, bool]:
        return (not c.quality.rated, c.quality.rated and c.size_estimated)

    by_score = sorted(candidates, key=lambda c: (tier(c), -c.score, c.model_id))
    seen: set[str] = set()
    marked: list[Candidate] = []
    for c in by_score:
        model = (c.base_model or c.model_id).lower()
        marked.append(replace(c, repeat_of_model=model in seen))
        seen.add(model)
    return sorted(marked, key=lambda c: (tier(c), c.repeat_of_model))


def target_of(cards: Sequence[GpuTarget]) -> GpuTarget:
    """The per-GPU target of some cards of a set (the smallest card bounds each rank)."""
    return parallel.per_gpu(cards)


def _evaluate(
    model: ModelSpec, gpu: GpuTarget, goal: Goal, fixed: ServingSettings | None,
    capacity_of: CapacityOf, layout: parallel.Layout | None = None,
) -> Candidate | Rejection:
    """The best deployment of ``model`` on ``gpu`` (per rank, with ``layout``), or why none."""
    util = utilization_for(gpu, goal.vllm_version)
    kv_options = ["auto"]
    if fp8_kv_supported(gpu.compute_capability, model.head_dim, goal.vllm_version):
        kv_options.append("fp8")
    if fixed is not None and fixed.kv_cache_dtype != "auto":
        kv_options = [fixed.kv_cache_dtype]
    best: tuple[PlanInputs, Capacity] | None = None
    borderline: tuple[PlanInputs, Capacity] | None = None
    last_reason = ""
    shortfall: int | None = None
    for kv_dtype in kv_options:
        inputs, cap = _plan_one(model, gpu, goal, kv_dtype, util, fixed, capacity_of, layout)
        unsupported = check_support(inputs)
        if unsupported is not None:
            last_reason = unsupported.message
            continue
        if not cap.fits:
            last_reason = cap.failure.message if cap.failure else "does not fit"
            if cap.verdict == VERDICT_BORDERLINE:
                last_reason = borderline_note(cap)
                borderline = borderline or (inputs, cap)
            shortfall = kv_needed_bytes(cap, goal.users) - max(cap.available_kv_low_bytes, 0)
            continue
        if cap.max_concurrency_low < goal.users:  # the band's lower edge must serve them
            shortfall = kv_needed_bytes(cap, goal.users) - cap.available_kv_low_bytes
            last_reason = (
                f"{times_text(cap.max_concurrency_low, '')} requests of "
                f"{cap.max_model_len:,} tokens fit at the band's lower edge, {goal.users:,} "
                f"wanted ({kv_dtype} KV)"
            )
            continue
        best = (inputs, cap)
        break  # 16-bit KV first: fp8 only when 16-bit does not serve the goal
    if best is None:
        reason = join_clauses(last_reason or "does not fit", more_kv_text(shortfall))
        return Rejection(model.model_id, reason, shortfall, borderline)
    inputs, cap = best
    total, active = _params(model)
    frac = active / total if total else 1.0
    tps = decode_tokens_per_s(cap, gpu, goal.context_tokens, frac)
    prompt = min(TYPICAL_PROMPT_TOKENS[goal.use_case], cap.max_model_len)
    ttft = ttft_seconds(active, prompt, gpu)
    if layout is not None and layout.world_size > 1:
        # per-rank figures: TP ranks share each token's work over the all-reduce path;
        # pipeline stages run one after another for one stream
        gain = parallel.speedup(layout) / layout.tensor_parallel_size
        if tps is not None:
            tps *= gain / layout.pipeline_parallel_size
        if ttft is not None:
            ttft /= parallel.speedup(layout)
    kv_headroom = kv_headroom_bytes(cap, goal.users)
    tight = is_tight(cap, goal.users)
    short_context = cap.max_model_len < goal.context_tokens
    catalog_id = _catalog_id(model.model_id)
    quality = figure_for(model.model_id, goal.use_case, catalog_id, model.quantization)
    base = base_of(model.model_id, catalog_id)
    score = _score(goal, total, active, weight_bits_of(model), cap, tps, ttft, quality)
    if short_context:
        score -= 5
    kv_note = "fp8 KV" if inputs.kv_cache_dtype == "fp8" else "16-bit KV"
    reason = (
        f"{times_text(cap.max_concurrency)} {cap.max_model_len:,}-token requests with {kv_note}"
        + (f", {estimated_rate(tps)}" if tps else "")
        + (f"; the model stops at {cap.max_model_len:,} tokens" if short_context else "")
        + (f", KV headroom {kv_headroom / GiB:.1f} GiB" if tight else "")
    )
    return Candidate(
        model_id=model.model_id,
        quantization=model.quantization.method if model.quantization else None,
        weight_bits=weight_bits_of(model),
        params_total=total,
        params_active=active,
        inputs=inputs,
        capacity=cap,
        decode_tokens_per_s=tps,
        ttft_s=ttft,
        score=score,
        reason=reason,
        tight=tight,
        kv_headroom_bytes=kv_headroom,
        quality=quality,
        base_model=base,
        size_estimated=model.weights_source == SOURCE_ESTIMATE,
    )


def _catalog_id(repo: str) -> str | None:
    """The id of the catalog entry checkpoint ``repo`` belongs to (None outside the catalog)."""
    from kvpilot.core.models.catalog import find

    found = find(repo)
    return found[0].id if found else None


def quality_points(quality: QualityFigure, params: int, active: int, bits: int) -> float:
    """The quality part of a score: :data:`RATED_BASE` plus the published figure when rated;
    else the fallback, :data:`FALLBACK_PER_DECADE` points per decade of effective parameters
    (a mixture of experts counts as the geometric mean of its total and active parameters)
    times the quantization factor, which stays below every rated plan."""
    if quality.score is not None:
        return RATED_BASE + quality.score
    effective = math.sqrt(params * active) if active and active < params else params
    return _quality(int(effective), bits) * FALLBACK_PER_DECADE


def _score(
    goal: Goal, params: int, active: int, bits: int, cap: Capacity, tps: float | None,
    ttft: float | None, quality: QualityFigure | None = None,
) -> float:
    """Higher is better: the published quality figure first (:func:`quality_points`), then
    what the use case values: chat and coding single-stream tokens/s, batch total tokens/s at
    the planned concurrency, long documents the concurrency at full context."""
    score = quality_points(quality or unrated(""), params, active, bits)
    if tps is not None:
        if goal.use_case in ("chat", "coding"):
            score += min(tps, 60) / 20 - (2 if tps < 15 else 0)
        elif goal.use_case == "batch":
            total_tps = tps * max(cap.max_concurrency_low, 1)
            score += math.log2(max(total_tps, 1)) * 0.8
    if ttft is not None and goal.use_case in ("chat", "coding") and ttft > 1.0:
        score -= 1
    if goal.use_case == "long-docs":
        score += math.log2(max(cap.max_concurrency_low, 1)) * 0.3
    if cap.kv_cache_dtype == "fp8":
        score -= 0.2
    return round(score, 4)


def kv_headroom_bytes(cap: Capacity, users: int) -> int:
    """KV bytes left over once ``users`` full-context requests have theirs, at the band's lower
    edge (headroom that holds even if vLLM takes more than predicted); negative when short."""
    return cap.available_kv_low_bytes - kv_needed_bytes(cap, users)


def is_tight(cap: Capacity, users: int) -> bool:
    """The one "tight" rule (the CLI's reason and the GUI's amber mark): a plan whose KV
    headroom for ``users`` (:func:`kv_headroom_bytes`) is below :data:`TIGHT_HEADROOM_BYTES`."""
    return kv_headroom_bytes(cap, users) < TIGHT_HEADROOM_BYTES


def kv_needed_bytes(cap: Capacity, users: int) -> int:
    """KV bytes ``users`` full-context requests need (full-attention approximation)."""
    blocks = math.ceil(cap.max_model_len / cap.block_size) * users
    return blocks * cap.page_bytes_per_block


def feasibility(
    inputs: PlanInputs, contexts: Sequence[int], kv_dtypes: Sequence[str] = ("auto", "fp8")
) -> dict[str, list[float]]:
    """Maximum concurrency of ``inputs`` at each context, per KV dtype (NaN where the engine
    cannot say, 0 where nothing fits): the planner's context x users chart."""
    from kvpilot.core.base.errors import KvpilotError

    out: dict[str, list[float]] = {}
    for dtype in kv_dtypes:
        row: list[float] = []
        for ctx in contexts:
            try:
                cap = budget.compute_capacity(
                    replace(inputs, max_model_len=ctx, kv_cache_dtype=dtype)
                )
            except KvpilotError:
                row.append(float("nan"))
                continue
            row.append(float(cap.max_concurrency) if cap.available_kv_bytes > 0 else 0.0)
        out[dtype] = row
    return out



def why_above(first: Candidate, second: Candidate) -> str:
    """One sentence saying why ``first`` ranks above ``second``: the tier of
    :func:`ranked_order` that parts them (a published figure, a published size, the model's
    best plan), else the quality figure, then speed."""
    qa, qb = first.quality, second.quality
    if qa.rated and not qb.rated:
        return (f"{first.model_id} has a published {qa.benchmark} figure; "
                f"{second.model_id} is unrated")
    if qb.rated and second.size_estimated and not first.size_estimated:
        return (f"{first.model_id}'s size is published; {second.model_id}'s is only the byte "
                "model's estimate, so it ranks after every rated plan of published size")
    if second.repeat_of_model and not first.repeat_of_model:
        return (f"{second.model_id} is another upload of {second.base_model or second.model_id}, "
                "whose best plan ranks above; each model's best plan is shown first")
    if qa.rated and qb.rated and qa.score != qb.score:
        return (f"{first.model_id} scores {qa.score:.1f} on {qa.benchmark} against "
                f"{qb.score:.1f} for {second.model_id}")
    speed_a, speed_b = first.decode_tokens_per_s, second.decode_tokens_per_s
    if speed_a and speed_b and abs(speed_a - speed_b) >= 1:
        return (f"same quality evidence; {first.model_id} decodes ~{speed_a:.0f} tok/s against "
                f"~{speed_b:.0f}")
    return (f"same quality evidence; {first.model_id} leaves more room for the goal "
            f"(score {first.score:.1f} against {second.score:.1f})")
