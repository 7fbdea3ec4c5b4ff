"""The sentence a borderline plan shows, and the measured dry run that settles it.

A plan is borderline for one of two reasons: the available-KV band straddles vLLM's start-up
check (the KV cache fits at one edge and not at the other; under WSL2 the lower edge allows for
Windows' memory, :mod:`.wsl2_residency`), or the KV cache fits across the
band but the CUDA graphs are captured after it from memory outside the budget that may not be
free (``Capacity.inputs["graph_capture_borderline"]``: :mod:`.nccl_capture`, and the V2 runner's
graphs before 0.29 beside another process).
"""

from __future__ import annotations

from kvpilot.core.base.plan import Capacity
from kvpilot.core.base.units import GiB

#: a documented estimate of a dry run (seconds) when no start-up was measured on this machine:
#: 0.20+ start-ups of 7B-14B models spend 60-120 s in profiling, torch.compile and graph
#: capture (cold compile cache); without a cache it is the upper end
DRY_RUN_ESTIMATE_S = 180


def borderline_note(cap: Capacity, startup_s: float | None = None) -> str:
    """The sentence a borderline plan shows: why, and the measured dry run to settle it.

    ``startup_s`` is a measured start-up time for this model and GPU (``Measured.startup_s``);
    without one the note uses :data:`DRY_RUN_ESTIMATE_S`.
    """
    low, high = cap.available_kv_band_bytes
    if startup_s is not None:
        took = f"about {startup_s:.0f} s, as the last launch of this model here took"
    else:
        took = (f"about {DRY_RUN_ESTIMATE_S // 60} minutes (vLLM's start-up with dummy "
                f"weights: profiling, torch.compile and CUDA-graph capture)")
    why = "the start-up check passes only in part of that range"
    room = cap.inputs.get("wsl2_residency_bytes")
    if room:
        why += (f" (the lower end allows {room / GiB:.2f} GiB that Windows may make resident "
                "while vLLM loads under WSL2, which vLLM counts as its own)")
    if cap.inputs.get("graph_capture_borderline"):
        why = ("the CUDA-graph capture after it needs memory beyond the budget that may not be "
               "free (see the cudagraph line)")
    return (
        f"borderline: vLLM would have {low / GiB:.2f} to {high / GiB:.2f} GiB for the KV cache, "
        f"and {why}; `kvpilot plan --measure` starts vLLM once with dummy weights (no download) "
        f"to settle it: {took}"
    )
