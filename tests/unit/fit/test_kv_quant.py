"""Bytes per head and token of the packed --kv-cache-dtype kinds of vLLM 0.29.0, and the plan
they give."""

from __future__ import annotations

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit import kv_quant
from kvpilot.core.fit.budget import compute_capacity


def test_packed_kv_dtypes_size_one_head_as_the_backends_do() -> None:
    # head 128: NVFP4 stores 64 data + 8 scale bytes per side (FlashInfer customize_spec)
    assert kv_quant.head_bytes("nvfp4", 128, 1) == 2 * (64 + 8)
    assert kv_quant.head_bytes("nvfp4_4over6", 128, 1) == 144
    # per-token-head: a byte per value and a float32 scale per side (Triton customize_spec)
    assert kv_quant.head_bytes("int8_per_token_head", 128, 1) == 2 * 128 + 8
    assert kv_quant.head_bytes("fp8_per_token_head", 128, 1) == 264
    assert kv_quant.head_bytes("int4_per_token_head", 128, 1) == 2 * 64 + 8
    # TurboQuant slots: FP8 keys 128 + 4-bit values 64 + 4; MSE keys 64 + 2 norm bytes
    assert kv_quant.head_bytes("turboquant_k8v4", 128, 1) == 196
    assert kv_quant.head_bytes("turboquant_4bit_nc", 128, 1) == 66 + 68
    assert kv_quant.head_bytes("turboquant_k3v4_nc", 128, 1) == 50 + 68
    assert kv_quant.head_bytes("turboquant_3bit_nc", 128, 1) == 50 + 52
    # a plain kind: K and V of one element each
    assert kv_quant.head_bytes("auto", 128, 2) == 512


def test_nvfp4_kv_cache_holds_more_tokens_in_the_same_budget() -> None:
    qwen = fixture_spec("qwen3-8b", weights_bytes=int(15.3 * GiB))
    base = compute_capacity(rtx4090(qwen, max_model_len=32768, vllm_version="0.29.0"))
    fp4 = compute_capacity(rtx4090(qwen, max_model_len=32768, vllm_version="0.29.0",
                                   kv_cache_dtype="nvfp4"))
    assert fp4.kv_bytes_per_token * 512 == base.kv_bytes_per_token * 144
    assert fp4.available_kv_bytes == base.available_kv_bytes
    assert fp4.kv_cache_tokens > 3 * base.kv_cache_tokens
