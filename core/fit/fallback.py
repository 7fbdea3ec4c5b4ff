"""The next configurations to try after a failure, each with its predicted effect.

Input is a failure (predicted by the fit engine or classified from vLLM's log: anything with
``kind`` and ``estimated_max_model_len``) and the plan that failed. Output is a ranked list of
:class:`FallbackOption`, each a complete new :class:`PlanInputs`, its predicted capacity and a
short label for a button ("context 32,640 — fits 4 users"). Options predicted to fit come first;
among them the smallest change to what the user asked for wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kvpilot.core.base import failures, versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import CPU_DEVICE_NAME, Capacity, PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import default_block_size
from kvpilot.core.fit import activation, budget, budget_now, fallback_adapters, linear_state
from kvpilot.core.fit.support import check_support, fp8_kv_supported

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
SMALLER_KV_SIZE = "smaller_kv_size"

#: failures a vision-language model can fix by disabling images (no encoder profile)
_MEMORY_FAILURES = frozenset({
    failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY, failures.CUDA_OOM_LOADING,
    failures.CUDA_OOM_GRAPHS, failures.CUDA_OOM_SERVING,
})

SMALLER_CAPTURE = "smaller_capture_sizes"
PIECEWISE_GRAPHS = "piecewise_graphs"
FREE_THE_GPU = "free_the_gpu"

#: failure kinds :func:`propose` has options for
ANSWERED_KINDS: tuple[str, ...] = (
    failures.KV_CACHE_TOO_SMALL,
    failures.NO_KV_MEMORY,
    failures.NEGATIVE_KV_BUDGET,
    failures.FREE_MEMORY_BELOW_UTILIZATION,
    failures.CUDA_OOM_LOADING,
    failures.CUDA_OOM_GRAPHS,
    failures.CUDA_OOM_SERVING,
    failures.ENGINE_DIED,
    failures.UNSUPPORTED_KV_DTYPE,
    failures.UNSUPPORTED_QUANTIZATION,
    failures.MAX_MODEL_LEN_ABOVE_MODEL,
    failures.MAMBA_CACHE_BLOCKS,
)


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
    """The predicted effect in a few words, with the KV tokens it leaves, so that options that
    all serve the users still read apart ("fits 4 users, 134,064 KV tokens")."""
    conc = cap.max_concurrency
    tokens = f"{max(0, cap.kv_cache_tokens):,} KV tokens"
    if conc < 1:
        return f"does not fit ({tokens} for a {cap.max_model_len:,}-token request)"
    if users:
        n = min(users, int(conc))
        return f"fits {n} user{'s' if n != 1 else ''}, {tokens}"
    return f"{conc:.1f}x concurrency, {tokens}"


def _round_down(value: int, multiple: int) -> int:
    return max(multiple, value // multiple * multiple)


def propose(
    failure: Failure,
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
    block = inputs.block_size or default_block_size(inputs.vllm_version)

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
        # 4. eager mode: no CUDA graphs (inside the budget from vLLM 0.20); the CPU backend
        # captures none, so it has nothing to give back there
        if not inputs.enforce_eager and not on_cpu(inputs):
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

    # 0.34's extensible KV cache: no start-up check to pass, and at 1.0 nothing to raise
    extensible = bool(original.inputs.get("extensible_kv_cache"))
    if kind == failures.FREE_MEMORY_BELOW_UTILIZATION and not extensible:
        _add_below_free(failure, inputs, original, free, add)
    elif kind == failures.NO_KV_MEMORY and _details(failure).get("requested_for") == (
            "kv_cache_auto"):
        _add_cpu_worker_share(failure, inputs, original, add)
    elif kind in (failures.CUDA_OOM_LOADING, failures.KV_CACHE_TOO_SMALL,
                  failures.NO_KV_MEMORY) and free is not None and not extensible:
        util = budget.max_passing_utilization(inputs.gpu_total_bytes, free)
        current = original.gpu_memory_utilization
        if util > 0 and abs(util - current) >= 0.01 and (
            kind != failures.KV_CACHE_TOO_SMALL or util > current
        ):
            add(UTILIZATION, replace(inputs, gpu_memory_utilization=util),
                f"utilization {util:.2f}", cost=0.5 if util < current else 0.8)
    elif extensible and kind in (failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY) \
            and original.gpu_memory_utilization < 1.0:
        add(UTILIZATION, replace(inputs, gpu_memory_utilization=None),
            "utilization unset (1.0 with the extensible KV cache)", cost=0.8)

    if kind == failures.UNSUPPORTED_KV_DTYPE:
        add(AUTO_KV, replace(inputs, kv_cache_dtype="auto"), "16-bit KV cache", cost=0.5)

    if kind == failures.MAX_MODEL_LEN_ABOVE_MODEL:
        limit = inputs.model.derived_max_model_len
        add(MODEL_MAX_LEN, replace(inputs, max_model_len=limit), f"context {limit:,}", cost=0.5)

    if kind in (failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY, failures.CUDA_OOM_LOADING,
                failures.UNSUPPORTED_QUANTIZATION, failures.CUDA_OOM_GRAPHS,
                failures.NEGATIVE_KV_BUDGET):
        for model in _smaller_checkpoints(inputs.model, smaller_models)[:2]:
            new = replace(inputs, model=model, quantization=None)
            add(SMALLER_CHECKPOINT, new, f"{model.model_id}", cost=2.5)

    # a hybrid linear-attention model has fewer pool blocks than sequences
    if kind == failures.MAMBA_CACHE_BLOCKS:
        for state_opt in linear_state.mamba_blocks_options(failure, inputs, original, plan):
            add(state_opt.kind, state_opt.inputs, state_opt.change, state_opt.cost)

    # LoRA slots, rank and the drafter: give their memory back (or fix a refused setting)
    for opt_kind, new, change, cost, cap in fallback_adapters.planned_candidates(
            failure, inputs, original, plan):
        if check_support(new) is None:
            label = fallback_adapters.effect_label(change, original, cap, _fits_label(cap, users))
            options.append(FallbackOption(opt_kind, label, change, new, cap, cap.fits, cost))

    # the CUDA-graph capture ran out of memory / vLLM's KV budget came out negative
    for extra in (
        *_graph_oom_options(failure, inputs, original, plan, users),
        *_negative_budget_options(failure, inputs, original, free, plan, users),
    ):
        if check_support(extra.inputs) is None:
            options.append(extra)

    # predicted-to-fit first, then by cost; drop duplicates of the same change, and any option
    # that would launch what just failed (an explicit value equal to the default it replaces;
    # "close other programs, then retry" is the same launch on purpose)
    seen: set[str] = set()
    ranked: list[FallbackOption] = []
    failed = _launched(inputs, original)
    for opt in sorted(options, key=lambda o: (not o.predicted_fits, o.cost,
                                              -o.capacity.available_kv_low_bytes)):
        same = opt.kind != FREE_THE_GPU and _launched(opt.inputs, opt.capacity) == failed
        if opt.change in seen or same:
            continue
        seen.add(opt.change)
        ranked.append(opt)
    return ranked


def on_cpu(inputs: PlanInputs) -> bool:
    """True for a plan on vLLM's CPU backend (the RAM is its memory; no CUDA graphs)."""
    return inputs.gpu_name == CPU_DEVICE_NAME or versions.Release.parse(
        inputs.vllm_version).is_cpu_build


def _launched(inputs: PlanInputs, cap: Capacity) -> tuple[object, ...]:
    """What a launch of ``inputs`` asks vLLM for, defaults resolved as the plan resolves them:
    two plans with the same tuple are the same launch."""
    return (
        inputs.model.model_id, cap.gpu_memory_utilization, cap.max_model_len, cap.max_num_seqs,
        cap.max_num_batched_tokens, cap.kv_cache_dtype, inputs.kv_cache_memory_bytes,
        inputs.enforce_eager, inputs.quantization, inputs.limit_mm_per_prompt,
        inputs.max_cudagraph_capture_size, inputs.cudagraph_mode, inputs.enable_lora,
        inputs.max_loras, inputs.max_lora_rank, inputs.max_cpu_loras,
        inputs.speculative_config, inputs.tensor_parallel_size,
    )


#: room kept below vLLM's own free-memory reading for the desktop to grow before a relaunch
_RELAUNCH_SAFETY_BYTES = budget_now.SAFETY_BYTES


def _add_below_free(
    failure: Failure,
    inputs: PlanInputs,
    original: Capacity,
    free: int | None,
    add: Callable[..., None],
) -> None:
    """After vLLM's free-memory check refused the plan: the lower utilization vLLM itself
    names as the fix, sized on the free memory vLLM read (its own context already counted)
    when the failure carries it, else on the lower of ``free`` and the plan's reading (kvpilot's
    own refusal re-reads it at launch). An explicit KV cache
    size larger than the free memory (the CPU backend's check) becomes one that fits."""
    details = _details(failure)
    total = int(details.get("total_bytes") or inputs.gpu_total_bytes)
    seen = details.get("free_bytes")
    current = original.gpu_memory_utilization
    if details.get("requested_for") == "kv_cache" and isinstance(seen, int):
        size = (seen - _RELAUNCH_SAFETY_BYTES) // GiB * GiB
        if size > 0 and size != inputs.kv_cache_memory_bytes:
            add(SMALLER_KV_SIZE, replace(inputs, kv_cache_memory_bytes=size),
                f"KV cache {size / GiB:.0f} GiB", cost=0.5)
        return
    # kvpilot's own refusal carries no reading of vLLM's: the plan holds the one made at launch
    readings = [x for x in (free, inputs.gpu_free_bytes) if x is not None]
    if isinstance(seen, int):
        util = budget_now.max_startup_utilization(total, seen, _RELAUNCH_SAFETY_BYTES)
    elif readings:
        util = budget.max_passing_utilization(inputs.gpu_total_bytes, min(readings))
    else:
        return
    util = min(util, round(current - 0.01, 2))
    if util > 0:
        add(UTILIZATION, replace(inputs, gpu_memory_utilization=util),
            f"utilization {util:.2f}", cost=0.5)


def _add_cpu_worker_share(
    failure: Failure, inputs: PlanInputs, original: Capacity, add: Callable[..., None]
) -> None:
    """The CPU worker's share of the RAM (utilization x total) was all taken before its KV
    cache: the utilization whose share holds what the worker already held, as vLLM measured it,
    plus the plan's KV cache for all its sequences at full length, if the RAM vLLM saw free
    allows it."""
    details = _details(failure)
    total = details.get("total_bytes")
    worker = details.get("worker_requested_bytes")
    left = details.get("kv_left_bytes")
    seen = details.get("free_bytes")
    if not all(isinstance(x, int) for x in (total, worker, left, seen)) or not total:
        return
    assert isinstance(total, int) and isinstance(worker, int) and isinstance(left, int)
    assert isinstance(seen, int)
    held = worker - left
    need = original.kv_bytes_per_token * original.max_model_len * max(1, original.max_num_seqs)
    util = math.ceil((held + need) / total * 100) / 100
    ceiling = budget_now.max_startup_utilization(total, seen, _RELAUNCH_SAFETY_BYTES)
    if original.gpu_memory_utilization < util <= ceiling:
        add(UTILIZATION, replace(inputs, gpu_memory_utilization=util),
            f"utilization {util:.2f}", cost=0.8)


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


def _details(failure: Failure) -> dict[str, Any]:
    raw = getattr(failure, "details", None)
    return dict(raw) if isinstance(raw, Mapping) else {}


def _option(
    kind: str, new: PlanInputs, change: str, cost: float, cap: Capacity, effect: str,
    users: int | None,
) -> FallbackOption:
    label = f"{change} — {effect}, {_fits_label(cap, users)}"
    return FallbackOption(kind, label, change, new, cap, cap.fits, cost)


def _graph_oom_options(
    failure: Failure,
    inputs: PlanInputs,
    original: Capacity,
    plan: Callable[[PlanInputs], Capacity],
    users: int | None,
) -> list[FallbackOption]:
    """Out of memory while capturing CUDA graphs: smaller capture sizes (with the release's
    flag), PIECEWISE instead of FULL graphs (0.11+), a lower utilization that leaves the graphs
    room outside vLLM's budget. Eager mode is proposed by :func:`propose` for every OOM.

    Each effect is the fit engine's CUDA-graph estimate
    (:func:`kvpilot.core.fit.activation.plan_cudagraph_bytes`) for the new setting.
    """
    if failure.kind != failures.CUDA_OOM_GRAPHS or inputs.enforce_eager:
        return []
    version = inputs.vllm_version
    seqs, batched = original.max_num_seqs, original.max_num_batched_tokens
    largest = activation.largest_default_capture(version, inputs.compute_capability)

    def graphs(new: PlanInputs) -> int:
        return activation.plan_cudagraph_bytes(
            new, new.model, max_num_seqs=seqs, max_num_batched_tokens=batched
        )

    now = graphs(inputs)
    out: list[FallbackOption] = []
    current = inputs.max_cudagraph_capture_size or activation.max_cudagraph_capture_size(
        seqs, batched, largest
    )
    flag = versions.cudagraph_size_flag(version)
    if flag is not None and current > 1:
        size = current // 2 if current < 16 else current // 2 // 8 * 8
        new = replace(inputs, max_cudagraph_capture_size=size)
        out.append(_option(
            SMALLER_CAPTURE, new, f"capture sizes up to {size} ({flag})", 1.0, plan(new),
            f"CUDA graphs {now / GiB:.2f} -> {graphs(new) / GiB:.2f} GiB", users,
        ))
    mode = (inputs.cudagraph_mode or "").upper()
    if versions.supports("full_cudagraphs_by_default", version) and (
        mode not in ("PIECEWISE", "NONE")
    ):
        new = replace(inputs, cudagraph_mode="PIECEWISE")
        out.append(_option(
            PIECEWISE_GRAPHS, new, "PIECEWISE CUDA graphs (no FULL graphs)", 1.1, plan(new),
            f"CUDA graphs {now / GiB:.2f} -> {graphs(new) / GiB:.2f} GiB", users,
        ))
    # lower utilization: the graphs still to capture need room outside the KV pool
    details = _details(failure)
    done, total = details.get("graphs_captured"), details.get("graphs_total")
    left = 1.0 - done / total if isinstance(done, int) and isinstance(total, int) and total else 1.0
    short = max(0, int(details.get("tried_to_allocate_bytes") or 0)
                - int(details.get("device_free_bytes") or 0))
    need = int(now * left) + short
    util = original.gpu_memory_utilization
    lower = math.floor((util * inputs.gpu_total_bytes - need) / inputs.gpu_total_bytes * 100) / 100
    lower = min(lower, round(util - 0.02, 2))
    if lower > 0.1:
        new = replace(inputs, gpu_memory_utilization=lower)
        out.append(_option(
            UTILIZATION, new, f"utilization {lower:.2f}", 1.3, plan(new),
            f"{(util - lower) * inputs.gpu_total_bytes / GiB:.2f} GiB more left for graphs", users,
        ))
    return out


def _negative_budget_options(
    failure: Failure,
    inputs: PlanInputs,
    original: Capacity,
    free: int | None,
    plan: Callable[[PlanInputs], Capacity],
    users: int | None,
) -> list[FallbackOption]:
    """vLLM computed a negative KV budget: a utilization that covers what it measured, or the
    same plan once the other program on the GPU is closed.

    The effect is the fit engine's capacity corrected by the gap between vLLM's figure and the
    prediction for the failed plan (the memory the model cannot see: another process, extra
    non-torch memory), so the proposed utilization is sized on what vLLM measured.
    """
    if failure.kind != failures.NEGATIVE_KV_BUDGET:
        return []
    from kvpilot.core.fit.calibrate import corrected_capacity

    reported = _details(failure).get("available_kv_bytes")
    if not isinstance(reported, int):
        return []
    gap = original.available_kv_bytes - reported  # memory vLLM saw taken that the plan did not
    total = inputs.gpu_total_bytes
    util = original.gpu_memory_utilization
    blocks = -(-original.max_model_len // max(1, original.block_size)) + 1
    one_request = blocks * original.page_bytes_per_block

    def target_for(margin: int) -> float:
        """The utilization whose budget, as vLLM measured it, holds one request + margin."""
        return math.ceil((util * total - reported + one_request + margin) / total * 100) / 100

    # the band's lower edge has to hold the request too: the corrected figure keeps the
    # model's validation width around it (calibrate.corrected_capacity)
    target = target_for(0) + 0.01
    probe: tuple[float, Capacity] | None = None
    if target <= 1.0:
        probe = (round(target, 2), plan(replace(inputs, gpu_memory_utilization=round(target, 2))))
        low, high = probe[1].available_kv_band_bytes
        target = max(target, target_for((high - low) // 2))
    ceiling = budget.max_passing_utilization(total, free) if free is not None else 0.98
    out: list[FallbackOption] = []
    if util < target <= min(ceiling, 1.0):
        new = replace(inputs, gpu_memory_utilization=round(target, 2))
        # the probe already planned these inputs when the band moved the target no further
        predicted = probe[1] if probe and probe[0] == round(target, 2) else plan(new)
        cap = corrected_capacity(
            new, predicted, predicted.available_kv_bytes - gap,
            f"corrected by the {gap / GiB:.2f} GiB vLLM measured beyond the plan",
        )
        out.append(_option(
            UTILIZATION, new, f"utilization {target:.2f}", 0.8, cap,
            f"KV {cap.available_kv_bytes / GiB:.2f} GiB", users,
        ))
    if gap > 0:
        cap = plan(inputs)
        out.append(FallbackOption(
            FREE_THE_GPU,
            f"close other programs on the GPU, then retry (vLLM saw {gap / GiB:.2f} GiB more "
            f"in use than planned) — KV {cap.available_kv_bytes / GiB:.2f} GiB, "
            f"{_fits_label(cap, users)}",
            f"free the {gap / GiB:.2f} GiB in use outside this plan",
            inputs, cap, cap.fits, 1.0,
        ))
    return out


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
