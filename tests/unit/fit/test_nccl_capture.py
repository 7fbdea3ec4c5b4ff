"""CUDA graphs captured through NCCL outside the KV budget: the published range of their memory
keeps a plan from "fits" (vLLM issue 5517; the custom all-reduce rule of the 0.8.5 wheel)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fitkit import fixture_spec

from kvpilot.core.base.plan import (
    VERDICT_BORDERLINE,
    VERDICT_DOES_NOT_FIT,
    VERDICT_FITS,
    PlanInputs,
)
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import nccl_capture
from kvpilot.core.fit.budget import CUDA_CONTEXT_BYTES, compute_capacity

# Qwen3-30B-A3B over four A10 with vLLM 0.8.5 (vLLM issue 17469: "Model loading took 14.2474
# GiB" per rank, the KV cache sized, then out of memory capturing the graphs); the A10's CUDA
# total is the 21.99 GiB vLLM issue 16199's log prints
QWEN3_30B = fixture_spec("qwen3-30b-a3b", weights_bytes=int(14.2474 * GiB * 4))
A10_TOTAL = int(21.99 * GiB)


def a10x4(**kw: object) -> PlanInputs:
    values: dict[str, object] = {
        "model": QWEN3_30B, "gpu_total_bytes": A10_TOTAL, "gpu_name": "NVIDIA A10",
        "compute_capability": (8, 6), "vllm_version": "0.8.5", "tensor_parallel_size": 4,
        "max_model_len": 8192}
    values.update(kw)
    return PlanInputs(**values)  # type: ignore[arg-type]


def test_the_a10_run_of_issue_17469_is_borderline_not_fits() -> None:
    cap = compute_capacity(a10x4())
    assert cap.failure is None  # the KV cache is sized, as vLLM's log says
    assert cap.verdict == VERDICT_BORDERLINE
    graphs = next(t for t in cap.terms if t.name == "cudagraph")
    assert "captured through NCCL" in graphs.note and "vLLM issue 5517" in graphs.note
    # the spare the note names: total - CUDA context - requested (default utilization 0.9)
    spare = A10_TOTAL - CUDA_CONTEXT_BYTES - cap.requested_bytes
    assert f"{spare / GiB:.2f} GiB is left" in graphs.note
    assert spare < nccl_capture.NCCL_CAPTURE_HIGH_BYTES


def test_nvlink_keeps_the_custom_all_reduce_and_the_plan_fits() -> None:
    cap = compute_capacity(a10x4(gpu_allreduce="nvlink"))
    assert cap.verdict == VERDICT_FITS
    assert "NCCL" not in next(t for t in cap.terms if t.name == "cudagraph").note


def test_enough_memory_beyond_the_budget_fits_through_nccl() -> None:
    # at utilization 0.75 about 5 GiB stays beyond the budget: above the estimate + 3.81 GiB
    cap = compute_capacity(a10x4(gpu_memory_utilization=0.75, gpu_allreduce="host"))
    assert cap.verdict == VERDICT_FITS
    # a free-memory reading replaces the card's total in the spare
    tight = a10x4(gpu_memory_utilization=0.75, gpu_allreduce="host",
                  gpu_free_bytes=cap.requested_bytes + CUDA_CONTEXT_BYTES + 2 * GiB)
    assert compute_capacity(tight).verdict == VERDICT_BORDERLINE


def test_graphs_inside_the_budget_or_eager_are_left_alone() -> None:
    # from 0.20 the estimate is inside the budget; eager mode captures nothing
    assert compute_capacity(a10x4(vllm_version="0.20.0")).verdict == VERDICT_FITS
    assert compute_capacity(a10x4(enforce_eager=True)).verdict == VERDICT_FITS


@pytest.mark.parametrize(("tp", "path", "nccl"), [
    (1, None, False),        # one GPU: no all-reduce
    (2, "p2p", False),       # two cards with P2P: custom all-reduce
    (4, "nvlink", False),    # fully connected by NVLink
    (4, "host", True),       # more than two PCIe-only GPUs: disabled
    (4, None, True),         # path not known: it may be disabled
    (3, "nvlink", True),     # a world size outside 2, 4, 6, 8
])
def test_the_custom_all_reduce_rule_of_the_release(tp: int, path: str | None,
                                                   nccl: bool) -> None:
    assert nccl_capture.through_nccl(a10x4(tensor_parallel_size=tp, gpu_allreduce=path)) is nccl


def test_the_need_is_the_estimate_plus_the_published_range() -> None:
    inputs = a10x4()
    assert nccl_capture.capture_need_bytes(inputs, GiB) == (
        GiB + int(1.1367 * GiB), GiB + int(3.8086 * GiB))
    assert nccl_capture.capture_need_bytes(replace(inputs, gpu_allreduce="nvlink"), GiB) is None
    # only a "fits" verdict moves; a failing plan keeps its verdict
    requested = A10_TOTAL - CUDA_CONTEXT_BYTES - 2 * GiB
    capture = nccl_capture.GraphCapture(graphs_outside=True, graphs_bytes=GiB,
                                        requested_bytes=requested)
    for verdict, out in ((VERDICT_FITS, VERDICT_BORDERLINE),
                         (VERDICT_DOES_NOT_FIT, VERDICT_DOES_NOT_FIT)):
        assert nccl_capture.capture_verdict(verdict, inputs, capture) == out
    inside = replace(capture, graphs_outside=False)
    assert nccl_capture.capture_verdict(VERDICT_FITS, inputs, inside) == VERDICT_FITS
    assert nccl_capture.note(inputs, inside) == ""
