"""CUDA graphs captured through NCCL outside the KV budget: memory known only as a range.

Where the CUDA graphs are captured after the KV cache from memory the budget does not hold
(before 0.20; under the V2 runner before 0.29, :func:`.runner.graphs_outside_budget`), the card
needs the captured pool free beyond the requested budget. With tensor parallelism and vLLM's
custom all-reduce off, the graphs also hold NCCL's all-reduces, whose captured collectives take
device memory the fitted graph estimate lacks. Its size is published only as a range:

* vLLM issue 5517 (A10G and L4, tensor parallel with the custom all-reduce disabled) measures
  the graph memory at 3.8086 GiB per GPU with CUDA drivers 12.2 / 12.3 and 1.1367 GiB with
  12.4 (the driver, not the toolkit, moves it);
* NCCL issue 1234 reports the growth of capture memory from NCCL 2.19 on, and the 0.8.5 wheel's
  ``env_override.py`` sets ``NCCL_CUMEM_ENABLE=0`` because NCCL's cuMem allocations cost 1 to
  2 GiB with graphs and all-reduce (its comment).

The plan therefore does not say "fits" while the memory left beyond the budget is below the
estimate plus the top of that range (3.81 GiB); it says "borderline" instead, also below the
bottom of the range, as the low figure is one driver's and no floor for others.

When the custom all-reduce is off, by the release's own rule
(``vllm/distributed/device_communicators/custom_all_reduce.py`` of the 0.8.5 and 0.15.1 wheels):
a tensor-parallel size outside 2, 4, 6, 8; more than two GPUs not fully connected by NVLink; or
GPUs without peer-to-peer access. The plan knows the path as ``PlanInputs.gpu_allreduce``
(``nvlink``, ``p2p`` for two cards with P2P, ``host``); where it is not known (None) the custom
all-reduce may be off, and the range applies.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.core.base.plan import VERDICT_BORDERLINE, VERDICT_FITS, PlanInputs, Verdict
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget_now import CUDA_CONTEXT_BYTES

#: graph memory per GPU captured through NCCL (bytes): vLLM issue 5517, A10G / L4, CUDA
#: driver 12.4 (low) and 12.2 / 12.3 (high)
NCCL_CAPTURE_LOW_BYTES = int(1.1367 * GiB)
NCCL_CAPTURE_HIGH_BYTES = int(3.8086 * GiB)
#: tensor-parallel sizes the custom all-reduce supports while graphs are captured outside the
#: budget (``_SUPPORTED_WORLD_SIZES`` of the 0.8.5 and 0.15.1 wheels; 16 joins later)
CUSTOM_ALLREDUCE_SIZES = (2, 4, 6, 8)
#: the all-reduce paths on which vLLM creates its custom all-reduce
_CUSTOM_PATHS = ("nvlink", "p2p")


def through_nccl(inputs: PlanInputs) -> bool:
    """Whether the captured graphs may hold NCCL's all-reduces: tensor parallel, and the custom
    all-reduce off by the release's rule or not known to be on."""
    tp = inputs.tensor_parallel_size
    if tp < 2:
        return False
    return tp not in CUSTOM_ALLREDUCE_SIZES or inputs.gpu_allreduce not in _CUSTOM_PATHS


def spare_bytes(inputs: PlanInputs, requested_bytes: int) -> int:
    """Memory left beyond the requested budget and vLLM's CUDA context (bytes): of the free
    memory when it was read, else of the whole card."""
    free = inputs.gpu_free_bytes if inputs.gpu_free_bytes is not None else inputs.gpu_total_bytes
    return free - CUDA_CONTEXT_BYTES - requested_bytes


def capture_need_bytes(inputs: PlanInputs, graphs_bytes: int) -> tuple[int, int] | None:
    """(low, high) bytes the capture needs beyond the budget when it goes through NCCL: the
    graph estimate plus the published range; None when it does not."""
    if not through_nccl(inputs):
        return None
    return graphs_bytes + NCCL_CAPTURE_LOW_BYTES, graphs_bytes + NCCL_CAPTURE_HIGH_BYTES


@dataclass(frozen=True)
class GraphCapture:
    """A plan's graph capture: whether it is outside the KV budget (``graphs_outside``), the
    graph estimate and the requested budget (bytes)."""

    graphs_outside: bool
    graphs_bytes: int
    requested_bytes: int


def capture_verdict(verdict: Verdict, inputs: PlanInputs, capture: GraphCapture) -> Verdict:
    """``verdict``, or "borderline" where a "fits" plan captures its graphs through NCCL outside
    the budget and the spare memory is below the graph estimate plus the top of the published
    range."""
    need = capture_need_bytes(inputs, capture.graphs_bytes) if capture.graphs_outside else None
    if need is None or verdict != VERDICT_FITS:
        return verdict
    spare = spare_bytes(inputs, capture.requested_bytes)
    return VERDICT_BORDERLINE if spare < need[1] else verdict


def note(inputs: PlanInputs, capture: GraphCapture) -> str:
    """The cudagraph line's tail where the NCCL range applies (empty otherwise)."""
    need = capture_need_bytes(inputs, capture.graphs_bytes) if capture.graphs_outside else None
    if need is None:
        return ""
    spare = spare_bytes(inputs, capture.requested_bytes)
    return (f"; captured through NCCL (custom all-reduce off or not known on), which needs "
            f"{need[0] / GiB:.2f} to {need[1] / GiB:.2f} GiB beyond the budget (vLLM issue "
            f"5517, by CUDA driver); {spare / GiB:.2f} GiB is left")
