"""Attention-backend refusals: FP8 KV vs a model no backend can run."""

from __future__ import annotations

from kvpilot.core.base import failures
from kvpilot.core.vllm.logparse import LogScanner

PREFIX = "(EngineCore pid=4242) ERROR 11-29 08:40:01 [core.py:1584] "


def _failure(line: str):
    scanner = LogScanner()
    scanner.feed(PREFIX + line)
    return scanner.failure


def test_no_backend_for_the_head_size_is_unsupported_model():
    failure = _failure(
        "ValueError: No valid attention backend found for cuda with head_size: 72, "
        "dtype: torch.bfloat16, kv_cache_dtype: auto. Reasons: {FLASH_ATTN: [head_size not "
        "supported], FLASHINFER: [head_size not supported]}."
    )
    assert failure is not None
    assert failure.kind == failures.UNSUPPORTED_MODEL
    assert "head_size" in failure.details["reasons"]


def test_no_backend_for_fp8_kv_stays_a_kv_dtype_problem():
    failure = _failure(
        "ValueError: No valid attention backend found for cuda with head_size: 128, "
        "kv_cache_dtype: fp8. Reasons: {FLASH_ATTN: [kv_cache_dtype not supported]}."
    )
    assert failure is not None and failure.kind == failures.UNSUPPORTED_KV_DTYPE
