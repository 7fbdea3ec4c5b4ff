"""The budget identity, vLLM's defaults per version and GPU, and every predicted failure kind."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
from fitkit import rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.base.versions import Release
from kvpilot.core.fit import activation
from kvpilot.core.fit.budget import (
    CUDA_CONTEXT_BYTES,
    compute_capacity,
    default_batching,
    max_passing_utilization,
)


def test_terms_add_up_to_the_requested_budget(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=32768))
    assert cap.requested_bytes == math.ceil((24564 << 20) * 0.92)
    assert cap.available_kv_bytes == (
        cap.requested_bytes - cap.weights_bytes - cap.non_torch_bytes
        - cap.activation_peak_bytes - cap.cudagraph_bytes
    )
    names = [t.name for t in cap.terms]
    assert names == ["requested", "weights", "non_torch", "activation_peak", "cudagraph",
                     "kv_cache"]
    assert {t.name: t.source for t in cap.terms}["weights"] == "file"
    assert cap.num_blocks == cap.available_kv_bytes // cap.page_bytes_per_block
    assert cap.fits and cap.failure is None


def test_defaults_follow_the_gpu_class_and_version():
    assert default_batching(24564 << 20, "NVIDIA GeForce RTX 4090", 32768, "0.33.0") == (2048, 256)
    assert default_batching(80 * GiB, "NVIDIA H100 80GB HBM3", 32768, "0.33.0") == (8192, 1024)
    assert default_batching(80 * GiB, "NVIDIA A100-SXM4-80GB", 32768, "0.33.0") == (2048, 256)
    assert default_batching(180 * GiB, "NVIDIA B200", 32768, "0.33.0") == (16384, 1024)
    # V0 without chunked prefill profiles the whole context
    assert default_batching(24 * GiB, "RTX 3090", 20000, "0.6.4") == (20000, 256)


def test_utilization_default_changed_in_0_20(qwen7b):
    assert compute_capacity(rtx4090(qwen7b, vllm_version="0.19.0")).gpu_memory_utilization == 0.9
    assert compute_capacity(rtx4090(qwen7b, vllm_version="0.20.0")).gpu_memory_utilization == 0.92


def test_cuda_graphs_enter_the_budget_from_0_20_and_never_in_eager_mode(qwen7b):
    old = compute_capacity(rtx4090(qwen7b, vllm_version="0.19.0", gpu_memory_utilization=0.9))
    new = compute_capacity(rtx4090(qwen7b, vllm_version="0.20.0", gpu_memory_utilization=0.9))
    eager = compute_capacity(rtx4090(qwen7b, vllm_version="0.20.0", gpu_memory_utilization=0.9,
                                     enforce_eager=True))
    assert old.cudagraph_bytes == 0
    assert new.cudagraph_bytes > 0
    assert eager.cudagraph_bytes == 0
    assert eager.available_kv_bytes > new.available_kv_bytes


def test_fp8_kv_doubles_the_token_capacity(qwen7b):
    bf16 = compute_capacity(rtx4090(qwen7b, max_model_len=32768))
    fp8 = compute_capacity(rtx4090(qwen7b, max_model_len=32768, kv_cache_dtype="fp8"))
    assert fp8.kv_bytes_per_token * 2 == bf16.kv_bytes_per_token
    assert fp8.kv_cache_tokens == pytest.approx(2 * bf16.kv_cache_tokens, rel=0.001)


def test_kv_cache_memory_bytes_replaces_the_utilization_budget(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, kv_cache_memory_bytes=4 * GiB, max_model_len=8192))
    assert cap.available_kv_bytes == 4 * GiB
    assert {t.name: t.source for t in cap.terms}["kv_cache"] == "user"


def test_kv_too_small_reports_vllms_estimated_length(llama8b):
    cap = compute_capacity(rtx4090(llama8b, max_model_len=131072))
    assert not cap.fits
    assert cap.failure is not None
    assert cap.failure.kind == failures.KV_CACHE_TOO_SMALL
    estimate = cap.failure.estimated_max_model_len
    assert estimate is not None and 0 < estimate < 131072
    # the estimate itself passes vLLM's check at the central prediction (it sits on the edge,
    # so the band makes it borderline, never "does not fit")
    at = compute_capacity(rtx4090(llama8b, max_model_len=estimate))
    assert at.failure is None and at.verdict in ("fits", "borderline")
    assert compute_capacity(rtx4090(llama8b, max_model_len=estimate + 16)).failure is not None


def test_weights_larger_than_the_budget_leave_no_kv_memory(llama8b):
    cap = compute_capacity(rtx4090(llama8b, gpu_memory_utilization=0.5, max_model_len=4096))
    assert cap.failure is not None and cap.failure.kind == failures.NO_KV_MEMORY
    assert cap.num_blocks == 0


def test_free_memory_below_the_request_names_the_utilization_that_starts(qwen7b):
    free = 22_000 * MiB  # a desktop holds ~2.5 GiB
    cap = compute_capacity(rtx4090(qwen7b, gpu_free_bytes=free, max_model_len=8192))
    assert cap.failure is not None
    assert cap.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    best = max_passing_utilization(24564 << 20, free)
    assert f"{best:.2f}" in cap.failure.message
    assert math.ceil((24564 << 20) * best) <= free - CUDA_CONTEXT_BYTES
    assert compute_capacity(rtx4090(qwen7b, gpu_free_bytes=free, max_model_len=8192,
                                    gpu_memory_utilization=best)).fits


def test_max_model_len_above_the_models_limit(qwen7b):
    limit = qwen7b.derived_max_model_len
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=limit * 2))
    assert cap.failure is not None and cap.failure.kind == failures.MAX_MODEL_LEN_ABOVE_MODEL


def test_tensor_parallel_splits_weights_per_gpu(qwen7b):
    one = compute_capacity(rtx4090(qwen7b))
    two = compute_capacity(rtx4090(qwen7b, tensor_parallel_size=2))
    # each rank holds half the checkpoint and the whole RoPE table
    rope = qwen7b.rope_cache_bytes
    assert two.weights_bytes == math.ceil((one.weights_bytes - rope) / 2) + rope
    assert two.non_torch_bytes > one.non_torch_bytes  # NCCL buffers


def test_activation_grows_with_batched_tokens_and_sequences(qwen7b):
    small = compute_capacity(rtx4090(qwen7b, max_num_batched_tokens=1024, max_num_seqs=16))
    big = compute_capacity(rtx4090(qwen7b, max_num_batched_tokens=8192, max_num_seqs=256))
    assert big.activation_peak_bytes > small.activation_peak_bytes


def test_bad_inputs_are_clear_errors(qwen7b):
    with pytest.raises(FitError, match="gpu_memory_utilization"):
        compute_capacity(rtx4090(qwen7b, gpu_memory_utilization=1.5))
    with pytest.raises(FitError, match="total memory"):
        compute_capacity(replace(rtx4090(qwen7b), gpu_total_bytes=0))
    with pytest.raises(FitError, match="tensor_parallel_size"):
        compute_capacity(rtx4090(qwen7b, tensor_parallel_size=0))


def test_version_profiles_are_ordered_and_cover_old_versions():
    assert activation.profile_for("0.6.4").engine == "V0"
    # FlashInfer sampler: bf16 logits 0.5 + fp32 copy 1 + masked copy 1 + probabilities 1
    assert activation.profile_for("0.10.1.1").sampler_logit_copies == 3.5
    # sort path: 0.5 + 1 + values 1 + int64 indices 2 + torch sort workspace 5
    assert activation.profile_for("0.11.0").sampler_logit_copies == 9.5
    assert activation.profile_for("0.10.1.1", (7, 5)).engine == "V0"  # V1 needs SM 8.0
    assert activation.profile_for("0.10.2", (7, 5)).engine == "V1"  # the SM check is gone
    assert activation.profile_for("0.33.0+cpu").cudagraph_in_budget
    assert activation.profile_for(None) is activation.PROFILES[0]
    sinces = [Release.parse(p.since).parts for p in activation.PROFILES]
    assert all(a >= b for a, b in itertools.pairwise(sinces))
