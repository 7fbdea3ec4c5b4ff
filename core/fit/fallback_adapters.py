"""Fallbacks for plans with LoRA slots or a drafter, each with its predicted effect.

After a memory failure (or a refusal of the adapter settings themselves) of a plan with
``--enable-lora`` or ``--speculative-config``:

* fewer LoRA slots (half of ``--max-loras``): each slot's stacks come back to the KV cache;
* a lower ``--max-lora-rank`` (the next rank vLLM accepts below): the stacks shrink in
  proportion; adapters of a higher rank are then refused when loaded, so this one is never
  taken by itself (:data:`NOT_AUTOMATIC`);
* speculative decoding off: the draft's weights, KV layers and larger captures come back;
* for a refused setting: the nearest rank vLLM accepts, ``--max-cpu-loras`` raised to
  ``--max-loras``, or speculative decoding off when the model has no MTP layers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import Capacity, PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import lora

FEWER_LORA_SLOTS = "fewer_lora_slots"
LOWER_LORA_RANK = "lower_lora_rank"
SPECULATIVE_OFF = "speculative_off"
LORA_RANK_ACCEPTED = "lora_rank_accepted"
MORE_CPU_LORAS = "more_cpu_loras"

#: option kinds a relaunch never takes by itself (they change what the server can load)
NOT_AUTOMATIC = frozenset({LOWER_LORA_RANK})

#: failures a smaller adapter or drafter footprint can answer
_MEMORY_KINDS = frozenset({
    failures.KV_CACHE_TOO_SMALL, failures.NO_KV_MEMORY, failures.CUDA_OOM_LOADING,
    failures.CUDA_OOM_GRAPHS, failures.CUDA_OOM_SERVING, failures.NEGATIVE_KV_BUDGET,
})

#: (kind, new inputs, change, cost) before planning
_Candidate = tuple[str, PlanInputs, str, float]


def adapter_candidates(failure: Failure, inputs: PlanInputs, original: Capacity
                       ) -> list[_Candidate]:
    """The adapter and drafter changes worth planning for ``failure`` of ``inputs``."""
    out: list[_Candidate] = []
    slots = original.inputs.get("max_loras")
    rank = original.inputs.get("max_lora_rank")
    if failure.kind in (failures.BAD_FLAG_VALUE, failures.UNSUPPORTED_MODEL):
        ranks = lora.allowed_ranks(inputs.vllm_version)
        if inputs.enable_lora and isinstance(rank, int) and rank not in ranks:
            accepted = max((r for r in ranks if r <= rank), default=ranks[0])
            out.append((LORA_RANK_ACCEPTED, replace(inputs, max_lora_rank=accepted),
                        f"LoRA rank {accepted} (one vLLM accepts)", 0.4))
        cpu = original.inputs.get("max_cpu_loras")
        if inputs.enable_lora and isinstance(cpu, int) and isinstance(slots, int) and cpu < slots:
            out.append((MORE_CPU_LORAS, replace(inputs, max_cpu_loras=slots),
                        f"{slots} adapters cached in host memory", 0.4))
        if inputs.speculative_config and "MTP" in failure.message:
            out.append((SPECULATIVE_OFF, replace(inputs, speculative_config=None),
                        "speculative decoding off", 0.6))
        return out
    if failure.kind not in _MEMORY_KINDS:
        return out
    if inputs.speculative_config:
        out.append((SPECULATIVE_OFF, replace(inputs, speculative_config=None, draft_model=None),
                    "speculative decoding off", 1.3))
    if inputs.enable_lora and isinstance(slots, int) and slots > 1:
        fewer = max(1, slots // 2)
        out.append((FEWER_LORA_SLOTS, replace(inputs, max_loras=fewer),
                    f"{fewer} LoRA slot{'s' if fewer != 1 else ''}", 1.4))
    if inputs.enable_lora and isinstance(rank, int):
        lower = max((r for r in lora.allowed_ranks(inputs.vllm_version) if r < rank),
                    default=None)
        if lower is not None:
            out.append((LOWER_LORA_RANK, replace(inputs, max_lora_rank=lower),
                        f"LoRA rank up to {lower}", 1.7))
    return out


def effect_label(change: str, original: Capacity, cap: Capacity, fits_label: str) -> str:
    """A button's text: the change, the KV memory it gives back, and the fit."""
    gained = cap.available_kv_bytes - original.available_kv_bytes
    return f"{change} — {gained / GiB:+.2f} GiB KV, {fits_label}"


def planned_candidates(
    failure: Failure,
    inputs: PlanInputs,
    original: Capacity,
    plan: Callable[[PlanInputs], Capacity],
) -> list[tuple[str, PlanInputs, str, float, Capacity]]:
    """:func:`adapter_candidates`, each planned with ``plan``."""
    return [(kind, new, change, cost, plan(new))
            for kind, new, change, cost in adapter_candidates(failure, inputs, original)]
