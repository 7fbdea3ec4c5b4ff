"""The profiling KV cache of ``_init_minimal_kv_cache_for_profiling`` (vLLM 0.26-0.33)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.plan import Capacity
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit import kv, profiling_kv
from kvpilot.core.fit.budget import CUDA_CONTEXT_BYTES, compute_capacity

QWEN35_27B = fixture_spec("qwen3.5-27b", weights_bytes=16 * GiB)


def test_the_capture_size_follows_vllms_default() -> None:
    # min(max_num_seqs x (1 + spec tokens) x 2, 512), capped at max_num_batched_tokens
    assert profiling_kv.max_capture_size(max_num_seqs=256, max_num_batched_tokens=2048) == 512
    assert profiling_kv.max_capture_size(max_num_seqs=8, max_num_batched_tokens=2048) == 16
    assert profiling_kv.max_capture_size(
        max_num_seqs=8, max_num_batched_tokens=2048, num_speculative_tokens=2) == 48
    assert profiling_kv.max_capture_size(max_num_seqs=256, max_num_batched_tokens=256) == 256
    assert profiling_kv.max_capture_size(
        max_num_seqs=1024, max_num_batched_tokens=8192, largest_default=1024) == 1024
    assert profiling_kv.max_capture_size(
        max_num_seqs=256, max_num_batched_tokens=2048, capture_size=64) == 64
    with pytest.raises(ValueError, match="at least 1"):
        profiling_kv.max_capture_size(max_num_seqs=0, max_num_batched_tokens=2048)


def test_one_block_per_sequence_a_graph_holds() -> None:
    # min(max_num_reqs, max_cudagraph_capture_size) blocks: 1024 sequences, 512-token graphs
    cache = profiling_kv.profiling_kv(max_num_seqs=1024, capture_size_tokens=512,
                                      bytes_per_block=40 * MiB)
    assert cache.blocks == 512
    assert cache.total_bytes == 20 * GiB
    assert profiling_kv.profiling_kv(max_num_seqs=8, capture_size_tokens=16,
                                     bytes_per_block=1).blocks == 8
    # before 0.26 (0.20.0, 0.24.0 wheels) the capture size alone: 16 blocks for 8 sequences
    assert profiling_kv.profiling_kv(max_num_seqs=8, capture_size_tokens=16, bytes_per_block=1,
                                     capped_at_sequences=False).blocks == 16
    with pytest.raises(ValueError, match="negative"):
        profiling_kv.profiling_kv(max_num_seqs=8, capture_size_tokens=16, bytes_per_block=-1)


def test_the_cache_must_fit_beside_the_weights() -> None:
    cache = profiling_kv.ProfilingKv(blocks=512, bytes_per_block=40 * MiB)  # 20 GiB
    assert profiling_kv.out_of_memory(
        cache, resident_bytes=10 * GiB, device_free_bytes=30 * GiB) is None
    failure = profiling_kv.out_of_memory(
        cache, resident_bytes=10 * GiB, device_free_bytes=29 * GiB)
    assert failure is not None and failure.kind == failures.CUDA_OOM_GRAPHS
    assert "512 KV blocks (20.00 GiB)" in failure.message
    assert "--max-num-seqs" in failure.message


@pytest.mark.parametrize(("version", "eager", "mode", "built"), [
    ("0.15.1", False, None, False),  # graphs outside the profile: no cache
    ("0.20.0", False, None, False),  # built, but the older count is not planned (module note)
    ("0.26.0", False, None, True),
    ("0.28.0", False, None, True),
    ("0.32.0", False, None, True),
    ("0.34.0", False, None, False),  # the extensible KV cache's own path
    ("0.28.0", True, None, False),  # --enforce-eager: nothing captured
    ("0.28.0", False, "NONE", False),
])
def test_the_releases_that_build_it(version: str, eager: bool, mode: str | None,
                                    built: bool) -> None:
    assert profiling_kv.applies(version, enforce_eager=eager, cudagraph_mode=mode) is built


def test_a_hybrid_with_many_sequences_runs_out_capturing() -> None:
    """A hybrid's block is widened to its Mamba state's page: with --max-num-seqs 1024 the
    512 profiling blocks no longer fit beside the weights, with 16 sequences they do."""
    def plan(seqs: int, **kw: object) -> Capacity:
        return compute_capacity(rtx4090(QWEN35_27B, max_model_len=8192, vllm_version="0.28.0",
                                        max_num_seqs=seqs, **kw))

    many = plan(1024)
    blocks = min(1024, 512, many.max_num_batched_tokens)
    need = many.weights_bytes + many.non_torch_bytes + blocks * many.page_bytes_per_block
    assert need > many.inputs["gpu_total_bytes"] - CUDA_CONTEXT_BYTES  # the premise
    assert many.failure is not None and many.failure.kind == failures.CUDA_OOM_GRAPHS
    assert many.verdict == "does_not_fit"
    few = plan(16)
    assert few.failure is None or few.failure.kind != failures.CUDA_OOM_GRAPHS
    eager = plan(1024, enforce_eager=True)
    assert eager.failure is None or eager.failure.kind != failures.CUDA_OOM_GRAPHS


def test_the_public_rtx_5090_start_up_that_ran_out_there() -> None:
    """calibration_cases_released.json, rtx5090-qwen38-27b-mtp-nvfp4-131k-maxseqs1024-OOM:
    a Qwen3.8-27B NVFP4 upload (Qwen3.6-27B's shape; its config.json copy here) with 18.48 GiB
    of weights on an RTX 5090 (31.36 GiB), vLLM 0.28.0, --max-num-seqs 1024, three MTP tokens,
    ran out of memory in _init_minimal_kv_cache_for_profiling; the started run of the same
    report (4 sequences, fp8 KV) did not."""
    model = fixture_spec("qwen3.6-27b-nvfp4", weights_bytes=int(18.48 * GiB))

    def plan(**kw: object) -> Capacity:
        inputs = rtx4090(model, max_model_len=131072, vllm_version="0.28.0",
                         speculative_config='{"method": "mtp", "num_speculative_tokens": 3}',
                         **kw)
        return compute_capacity(replace(inputs, gpu_total_bytes=int(31.36 * GiB),
                                        gpu_name="NVIDIA GeForce RTX 5090",
                                        compute_capability=(12, 0)))

    failed = plan(max_num_seqs=1024)
    assert failed.failure is not None and failed.failure.kind == failures.CUDA_OOM_GRAPHS
    # 512 blocks (min(1024, min(1024 x 4 x 2, 512))) of every layer group
    assert f"{512:,} KV blocks" in failed.failure.message
    started = plan(max_num_seqs=4, max_num_batched_tokens=4096, kv_cache_dtype="fp8")
    assert started.failure is None
    # the report's "Tried to allocate 784.00 MiB" is one layer's tensor of 256 such pages
    # (the GDN state's page, which the attention block of 784 tokens is widened to)
    assert kv.kv_layout(model, "auto").page_bytes * 256 == 784 * MiB


def test_the_v2_runner_builds_it_only_from_0_29() -> None:
    """A dense Qwen3-8B runs on the V2 runner from 0.22; its profile_cudagraph_memory returns 0
    (nothing allocated) up to 0.28, and builds the cache like V1 from 0.29. With 2,000 sequences
    of 16-token blocks (144 KiB a token: 2.25 MiB a block) the 512 blocks are 1.13 GiB; the plan
    is given only 0.5 GiB free beyond the weights and overheads."""
    model = fixture_spec("qwen3-8b", weights_bytes=int(15.3 * GiB))

    def plan(version: str) -> Capacity:
        probe = compute_capacity(rtx4090(model, max_model_len=4096, vllm_version=version,
                                         max_num_seqs=2000))
        free = probe.weights_bytes + probe.non_torch_bytes + GiB // 2 + CUDA_CONTEXT_BYTES
        return compute_capacity(rtx4090(model, max_model_len=4096, vllm_version=version,
                                        max_num_seqs=2000, gpu_memory_utilization=0.5,
                                        gpu_free_bytes=free))

    v2_028, v2_029 = plan("0.28.0"), plan("0.29.0")
    assert v2_028.inputs["model_runner"] == "V2" and v2_029.inputs["model_runner"] == "V2"
    assert v2_028.page_bytes_per_block == 16 * 36 * 2 * 8 * 128 * 2  # 2.25 MiB
    assert v2_028.failure is None or v2_028.failure.kind != failures.CUDA_OOM_GRAPHS
    assert v2_029.failure is not None and v2_029.failure.kind == failures.CUDA_OOM_GRAPHS
