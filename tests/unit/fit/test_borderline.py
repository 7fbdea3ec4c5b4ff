"""The sentence a borderline plan shows names why it is borderline."""

from __future__ import annotations

from dataclasses import replace

from fitkit import fixture_spec

from kvpilot.core.base.plan import VERDICT_BORDERLINE, PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.borderline import DRY_RUN_ESTIMATE_S, borderline_note
from kvpilot.core.fit.budget import compute_capacity

# Qwen3-30B-A3B over four A10 with vLLM 0.8.5 (vLLM issue 17469's weights, 14.2474 GiB per
# rank; the A10's 21.99 GiB CUDA total from vLLM issue 16199's log): the KV cache fits across
# its band, the graphs captured through NCCL after it may not
A10X4 = PlanInputs(
    model=fixture_spec("qwen3-30b-a3b", weights_bytes=int(14.2474 * GiB * 4)),
    gpu_total_bytes=int(21.99 * GiB), gpu_name="NVIDIA A10", compute_capability=(8, 6),
    vllm_version="0.8.5", tensor_parallel_size=4, max_model_len=8192)


def test_a_capture_borderline_names_the_capture_not_the_start_up_check() -> None:
    cap = compute_capacity(A10X4)
    assert cap.verdict == VERDICT_BORDERLINE
    assert cap.inputs["graph_capture_borderline"] is True
    note = borderline_note(cap)
    low, high = cap.available_kv_band_bytes
    assert f"{low / GiB:.2f} to {high / GiB:.2f} GiB for the KV cache" in note
    assert "CUDA-graph capture after it" in note
    assert "passes only in part" not in note
    assert f"about {DRY_RUN_ESTIMATE_S // 60} minutes" in note


def test_a_band_borderline_names_the_start_up_check_and_a_measured_start_up() -> None:
    cap = compute_capacity(A10X4)
    band = replace(cap, inputs={**cap.inputs, "graph_capture_borderline": False})
    note = borderline_note(band, startup_s=95.4)
    assert "the start-up check passes only in part of that range" in note
    assert "about 95 s, as the last launch of this model here took" in note


def test_a_plan_that_fits_is_not_marked_as_a_capture_borderline() -> None:
    cap = compute_capacity(replace(A10X4, gpu_allreduce="nvlink"))
    assert cap.inputs["graph_capture_borderline"] is False
