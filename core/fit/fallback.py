"""The next configurations to try after a failure, each with its predicted effect.

Input is a failure (predicted by the fit engine or classified from vLLM's log: anything with
``kind`` and ``estimated_max_model_len``) and the plan that failed. Output is a ranked list of
:class:`FallbackOption`, each a complete new :class:`PlanInputs`, its predicted capacity and a
short label for a button ("context 32,640 — fits 4 users"). Options predicted to fit come first;
among them the smallest change to what the user asked for wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from kvpilot.core import failures
from kvpilot.core.fit import budget
from kvpilot.core.fit.kv import DEFAULT_BLOCK_SIZE
from kvpilot.core.fit.plan import Capacity, GiB, PlanInputs
from kvpilot.core.fit.support import check_support, fp8_kv_supported
from kvpilot.core.models.spec import ModelSpec

#: option kinds (stable strings, shown in --json-events)
SHORTER_CONTEXT = "shorter_context"
FP8_KV = "fp8_kv"
FEWER_SEQUENCES = "fewer_sequences"
FEWER_BATCHED_TOKENS = "fewer_batched_tokens"
EAGER = "eager"
UTILIZATION = "utilization"
SMALLER_CHECKPOINT = "smaller_checkpoint"
AUTO_KV = "auto_kv"
MODEL_MAX_LEN = "model_max_len"
TEXT_ONLY = "text_only"

#: failures a vision-language model can fix by disabling images (no encoder profile)
_MEMORY_FAILURES = frozenset({
    failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY, failures.CUDA_OOM_LOADING,
    failures.CUDA_OOM_GRAPHS, failures.CUDA_OOM_SERVING,
})


class FailureLike(Protocol):
    kind: str
    estimated_max_model_len: int | None


@dataclass(frozen=True)
class FallbackOption:
    """One configuration to relaunch with.

    ``label`` is the button text with the predicted effect; ``change`` one phrase describing
    what differs from the failed plan; ``cost`` orders options by how much the user gives up.
    """

    kind: str
    label: str
    change: str
    inputs: PlanInputs
    capacity: Capacity
    predicted_fits: bool
    cost: float


def _fits_label(cap: Capacity, users: int | None) -> str:
    conc = cap.max_concurrency
    if users:
        n = min(users, int(conc))
        return f"fits {n} user{'s' if n != 1 else ''}" if conc >= 1 else "does not fit"
    return f"{conc:.1f}x concurrency"


def _round_down(value: int, multiple: int) -> int:
    return max(multiple, value // multiple * multiple)


def propose(
    failure: FailureLike,
    inputs: PlanInputs,
    *,
    free_bytes: int | None = None,
    smaller_models: Sequence[ModelSpec] | None = None,
    plan: Callable[[PlanInputs], Capacity] = budget.compute_capacity,
) -> list[FallbackOption]:
    """Ranked fallbacks for ``failure`` of ``inputs`` (best first; may be empty).

    ``free_bytes`` is the GPU's free memory now (for a utilization that passes the start-up
    check); ``smaller_models`` candidate checkpoints to step down to (default: catalog
    checkpoints of the same family with fewer weight bytes).
    """
    kind = failure.kind
    users = inputs.max_num_seqs
    original = plan(inputs)
    free = free_bytes if free_bytes is not None else inputs.gpu_free_bytes
    options: list[FallbackOption] = []

    def add(opt_kind: str, new: PlanInputs, change: str, cost: float, label: str | None = None,
            ) -> None:
        if check_support(new) is not None:
            return
        cap = plan(new)
        text = label or f"{change} — {_fits_label(cap, users)}"
        options.append(FallbackOption(opt_kind, text, change, new, cap, cap.fits, cost))

    length = original.max_model_len
    block = inputs.block_size or DEFAULT_BLOCK_SIZE

    if kind in (failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY,
                failures.CUDA_OOM_LOADING, failures.CUDA_OOM_GRAPHS, failures.CUDA_OOM_SERVING,
                failures.ENGINE_DIED):
        # 1. vLLM's own estimate of the longest context that fits
        estimate = failure.estimated_max_model_len
        if kind == failures.KV_CACHE_TOO_SMALL:
            if not estimate:
                estimate = original.failure.estimated_max_model_len if original.failure else None
            if estimate:
                new_len = _round_down(estimate, block) if estimate >= block else estimate
                # vLLM's estimate sits on the central prediction: step down to the longest
                # context whose band's lower edge still fits
                new_len = _longest_fitting_len(inputs, new_len, block, plan)
                add(SHORTER_CONTEXT, replace(inputs, max_model_len=new_len),
                    f"context {new_len:,}", cost=1.0 + (1 - new_len / max(length, 1)))
        # 2. fp8 KV halves the KV bytes per token
        if (inputs.kv_cache_dtype or "auto") == "auto" and fp8_kv_supported(
            inputs.compute_capability, inputs.model.head_dim, inputs.vllm_version
        ):
            add(FP8_KV, replace(inputs, kv_cache_dtype="fp8"),
                f"fp8 KV at {length:,}", cost=1.2)
        # 3. fewer sequences: smaller sampler and CUDA-graph footprint
        seqs = original.max_num_seqs
        if seqs > 1:
            fewer = max(1, seqs // 2) if kind != failures.KV_CACHE_TOO_SMALL else max(1, seqs - 1)
            add(FEWER_SEQUENCES, replace(inputs, max_num_seqs=fewer),
                f"{fewer} sequences at {length:,}", cost=1.5)
        # 4. eager mode: no CUDA graphs (inside the budget from vLLM 0.20)
        if not inputs.enforce_eager:
            add(EAGER, replace(inputs, enforce_eager=True), "eager mode (no CUDA graphs)",
                cost=1.8)
        # 5. smaller batched tokens: smaller activation peak
        batched = original.max_num_batched_tokens
        if batched > 512 and kind in (failures.NO_KV_MEMORY, failures.CUDA_OOM_GRAPHS,
                                      failures.CUDA_OOM_SERVING):
            add(FEWER_BATCHED_TOKENS, replace(inputs, max_num_batched_tokens=batched // 2),
                f"{batched // 2:,} batched tokens", cost=1.6)

    if kind in _MEMORY_FAILURES and inputs.model.vision is not None and (
        inputs.limit_mm_per_prompt != 0
    ):
        _add_text_only(inputs, original, users, plan, options)

    if kind in (failures.FREE_MEMORY_BELOW_UTILIZATION, failures.CUDA_OOM_LOADING,
                failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY) and free is not None:
        util = budget.max_passing_utilization(inputs.gpu_total_bytes, free)
        current = original.gpu_memory_utilization
        if util > 0 and abs(util - current) >= 0.01 and (
            kind != failures.KV_CACHE_TOO_SMALL or util > current
        ):
            add(UTILIZATION, replace(inputs, gpu_memory_utilization=util),
                f"utilization {util:.2f}", cost=0.5 if util < current else 0.8)

    if kind == failures.UNSUPPORTED_KV_DTYPE:
        add(AUTO_KV, replace(inputs, kv_cache_dtype="auto"), "16-bit KV cache", cost=0.5)

    if kind == failures.MAX_MODEL_LEN_ABOVE_MODEL:
        limit = inputs.model.derived_max_model_len
        add(MODEL_MAX_LEN, replace(inputs, max_model_len=limit), f"context {limit:,}", cost=0.5)

    if kind in (failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY, failures.CUDA_OOM_LOADING,
                failures.UNSUPPORTED_QUANTIZATION, failures.CUDA_OOM_GRAPHS):
        for model in _smaller_checkpoints(inputs.model, smaller_models)[:2]:
            new = replace(inputs, model=model, quantization=None)
            add(SMALLER_CHECKPOINT, new, f"{model.model_id}", cost=2.5)

    # predicted-to-fit first, then by cost; drop duplicates of the same change
    seen: set[str] = set()
    ranked: list[FallbackOption] = []
    for opt in sorted(options, key=lambda o: (not o.predicted_fits, o.cost,
                                              -o.capacity.available_kv_low_bytes)):
        if opt.change in seen:
            continue
        seen.add(opt.change)
        ranked.append(opt)
    return ranked


def _longest_fitting_len(
    inputs: PlanInputs, start: int, block: int, plan: Callable[[PlanInputs], Capacity]
) -> int:
    """The longest context <= ``start`` (a multiple of ``block``) whose verdict is "fits".

    Returns ``start`` when it fits or when nothing shorter does (the option then shows it).
    """
    if start <= block or plan(replace(inputs, max_model_len=start)).fits:
        return start
    lo, hi = 0, start // block  # in blocks: lo fits (0 = none found), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if plan(replace(inputs, max_model_len=mid * block)).fits:
            lo = mid
        else:
            hi = mid
    return lo * block if lo else start


def _add_text_only(
    inputs: PlanInputs,
    original: Capacity,
    users: int | None,
    plan: Callable[[PlanInputs], Capacity],
    options: list[FallbackOption],
) -> None:
    """"Text only (images disabled)": no encoder profile, and on recent releases no vision
    tower; the label says how much KV memory that gives back."""
    new = replace(inputs, limit_mm_per_prompt=0)
    if check_support(new) is not None:
        return
    cap = plan(new)
    gained = cap.available_kv_bytes - original.available_kv_bytes
    if gained <= 0:
        return  # V0 samples more dummy sequences without images: nothing to gain
    change = "text only (images disabled)"
    label = f"{change} — {gained / GiB:+.2f} GiB KV, {_fits_label(cap, users)}"
    options.append(FallbackOption(TEXT_ONLY, label, change, new, cap, cap.fits, cost=2.0))


def _family(model_id: str) -> str:
    name = model_id.split("/")[-1].lower()
    for token in ("-awq", "-gptq", "-fp8", "-int4", "-int8", "-w4a16", "-w8a8", "-quantized"):
        name = name.split(token)[0]
    return name


def _smaller_checkpoints(
    model: ModelSpec, candidates: Sequence[ModelSpec] | None
) -> list[ModelSpec]:
    """Checkpoints of the same model with fewer weight bytes, largest first."""
    if candidates is None:
        try:
            from kvpilot.core.models.catalog import all_checkpoint_specs

            candidates = all_checkpoint_specs()
        except Exception:  # noqa: BLE001 - a broken catalog must not break failure handling
            return []
    weights = model.weights_bytes or 0
    family = _family(model.model_id)
    same = [
        m for m in candidates
        if m.model_id != model.model_id
        and _family(m.model_id) == family
        and (m.weights_bytes or math.inf) < weights
    ]
    return sorted(same, key=lambda m: -(m.weights_bytes or 0))


def describe(option: FallbackOption) -> str:
    """One line for logs and --json-events: the change and its predicted KV capacity."""
    cap = option.capacity
    return (
        f"{option.label} (KV {cap.available_kv_bytes / GiB:.2f} GiB, "
        f"{cap.kv_cache_tokens:,} tokens, {cap.max_concurrency:.2f}x at {cap.max_model_len:,})"
    )


#: telemetry pressure-signal kinds that have a configuration fix (kvpilot.core.telemetry)
PRESSURE_KV_FULL = "kv_full"
PRESSURE_PREEMPTIONS = "preemptions"
PRESSURE_VRAM_FULL = "vram_full"


def fix_for_pressure(
    kind: str, inputs: PlanInputs, capacity: Capacity | None = None
) -> PlanInputs | None:
    """The plan that relieves a pressure signal seen while serving, or None when none does.

    * KV cache nearly full with requests waiting: FP8 KV where the GPU supports it, otherwise
      one sequence fewer;
    * preemptions rising: one sequence fewer;
    * VRAM nearly full while other processes grow: 0.03 less utilization.
    """
    seqs = inputs.max_num_seqs or (capacity.max_num_seqs if capacity else 2)
    if kind == PRESSURE_KV_FULL:
        if (inputs.kv_cache_dtype or "auto") == "auto" and fp8_kv_supported(
            inputs.compute_capability, inputs.model.head_dim, inputs.vllm_version
        ):
            return replace(inputs, kv_cache_dtype="fp8")
        return replace(inputs, max_num_seqs=max(1, seqs - 1))
    if kind == PRESSURE_PREEMPTIONS:
        return replace(inputs, max_num_seqs=max(1, seqs - 1))
    if kind == PRESSURE_VRAM_FULL:
        util = inputs.gpu_memory_utilization or (
            capacity.gpu_memory_utilization if capacity else 0.9
        )
        return replace(inputs, gpu_memory_utilization=round(max(0.1, util - 0.03), 2))
    return None

