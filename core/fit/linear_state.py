"""The per-sequence state of hybrid linear-attention models and the bound it puts on sequences.

Qwen3-Next, Qwen3.5 / 3.6 (Gated DeltaNet) and the Mamba2 hybrids (Nemotron-H, Granite 4) keep a
fixed recurrent state per sequence in their linear-attention layers. vLLM stores it in the same
block pool as the attention KV (:func:`kvpilot.core.fit.kv.kv_layout`: the state page padded to
the attention page, one block per sequence and linear group). From vLLM 0.20 the start-up also
checks, when decode runs with FULL CUDA graphs, that every sequence of ``--max-num-seqs`` can have
its state block: ``config/compilation.py`` raises "max_num_seqs (N) exceeds available Mamba cache
blocks (M)" when ``max_num_seqs > num_blocks`` of the pool. Eager mode and PIECEWISE graphs skip
that check.

:func:`mamba_blocks_failure` predicts the failure; :func:`mamba_blocks_verdict` turns it into the
verdict over the available-KV band; :func:`mamba_blocks_options` are the fallbacks with their
predicted effect (fewer sequences, PIECEWISE graphs, eager mode). Sizes are bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvpilot.core.base import failures, versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import Capacity, PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.kv import KvLayout

#: fallback kinds (stable strings)
FEWER_SEQUENCES = "fewer_sequences"
PIECEWISE_GRAPHS = "piecewise_graphs"
EAGER = "eager"

_FULL_MODES = frozenset({"FULL", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"})


def checks_state_blocks(inputs: PlanInputs, layout: KvLayout) -> bool:
    """True when vLLM checks ``max_num_seqs`` against the pool's blocks for this plan: a model
    with linear-attention layers, a release with the check (0.20+), and FULL decode graphs (the
    hybrid models' default FULL_AND_PIECEWISE unless eager or another mode is asked for)."""
    if not layout.has_state_layers or inputs.enforce_eager:
        return False
    if not versions.supports("mamba_blocks_check", inputs.vllm_version):
        return False
    mode = (inputs.cudagraph_mode or "FULL_AND_PIECEWISE").upper()
    return mode in _FULL_MODES


def mamba_blocks_failure(
    inputs: PlanInputs, layout: KvLayout, num_blocks: int, max_num_seqs: int
) -> Failure | None:
    """The "exceeds available Mamba cache blocks" failure vLLM would raise, or None."""
    if not checks_state_blocks(inputs, layout) or max_num_seqs <= num_blocks or num_blocks <= 0:
        return None
    return Failure(
        failures.MAMBA_CACHE_BLOCKS,
        f"max_num_seqs {max_num_seqs} is more than the {num_blocks} blocks of the KV pool; each "
        f"decoding sequence of this hybrid model needs one block for its "
        f"{layout.state_bytes_per_sequence / GiB:.3f} GiB linear-attention state, so at most "
        f"{num_blocks} sequences can start (or raise the utilization).",
        details={"max_num_seqs": max_num_seqs, "num_blocks": num_blocks,
                 "state_bytes_per_sequence": layout.state_bytes_per_sequence},
    )


def blocks_for(layout: KvLayout, available_kv_bytes: int) -> int:
    """Blocks of the pool for an available-KV size (vLLM: available // (page x group size))."""
    return max(0, available_kv_bytes) // layout.bytes_per_block


def mamba_blocks_verdict(
    inputs: PlanInputs, layout: KvLayout, band: tuple[int, int], max_num_seqs: int
) -> str | None:
    """"does_not_fit" when even the band's high edge leaves fewer blocks than sequences,
    "borderline" when only its low edge does, None when the check passes (or does not apply)."""
    if not checks_state_blocks(inputs, layout):
        return None
    if max_num_seqs > blocks_for(layout, band[1]):
        return "does_not_fit"
    if max_num_seqs > blocks_for(layout, band[0]):
        return "borderline"
    return None


@dataclass(frozen=True)
class StateOption:
    """A fallback for the state-blocks failure: the new plan and its predicted effect."""

    kind: str
    change: str
    inputs: PlanInputs
    capacity: Capacity
    cost: float


def mamba_blocks_options(
    failure: Failure,
    inputs: PlanInputs,
    original: Capacity,
    plan: Callable[[PlanInputs], Capacity],
) -> list[StateOption]:
    """Fallbacks for "max_num_seqs (N) exceeds available Mamba cache blocks (M)".

    1. fewer sequences: ``--max-num-seqs M`` with M the blocks vLLM logged (or, for a
       predicted failure, the planned blocks at the band's low edge), which passes the check;
    2. PIECEWISE CUDA graphs (vLLM skips the check; decode loses FULL graphs);
    3. eager mode (no graphs at all).
    """
    # vLLM's own count when the failure was read from its log; for a predicted one the blocks
    # at the band's low edge, so that the option is predicted to start
    logged = failure.details.get("num_blocks") if failure.details and failure.line else None
    blocks = int(logged) if isinstance(logged, int) and logged > 0 else 0
    if not blocks:
        blocks = max(1, original.available_kv_low_bytes // max(1, original.page_bytes_per_block))
    seqs = max(1, min(blocks, original.max_num_seqs - 1))
    options: list[StateOption] = []
    new = replace(inputs, max_num_seqs=seqs)
    options.append(StateOption(FEWER_SEQUENCES, f"{seqs} sequences (one state block each)",
                               new, plan(new), 1.0))
    new = replace(inputs, cudagraph_mode="PIECEWISE")
    options.append(StateOption(PIECEWISE_GRAPHS, "PIECEWISE CUDA graphs (no state-block check)",
                               new, plan(new), 1.6))
    if not inputs.enforce_eager:
        new = replace(inputs, enforce_eager=True)
        options.append(StateOption(EAGER, "eager mode (no CUDA graphs)", new, plan(new), 1.8))
    return options
