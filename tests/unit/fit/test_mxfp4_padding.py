"""The expert-tensor padding of vLLM's MXFP4 MoE kernels, against a logged gpt-oss start-up."""

from __future__ import annotations

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.mxfp4_padding import kernel_multiples, padding_bytes
from kvpilot.core.models.bytemodel import estimate_weight_bytes


def test_marlin_padding_reproduces_the_logged_a100_tp4_weights() -> None:
    # vLLM 0.10.1.1 on 4 x A100 80GB logged "Model loading took 17.2217 GiB" per rank for
    # gpt-oss-120b (calibration case dl-a100-80x4-gptoss120b-tp4-u0.8)
    spec = fixture_spec("gpt-oss-120b")
    checkpoint = estimate_weight_bytes(spec, spec.quantization)
    per_rank = checkpoint / 4 + padding_bytes(spec, 4, (8, 0))
    assert per_rank / GiB == pytest.approx(17.2217, rel=0.01)


def test_padding_follows_the_kernel_of_the_gpu() -> None:
    spec = fixture_spec("gpt-oss-20b")
    assert kernel_multiples((8, 9)) == (256, 128)  # Marlin on an RTX 4090
    assert kernel_multiples((9, 0)) == (1, 64)  # Triton on H100: 2880 needs none
    assert padding_bytes(spec, 1, (9, 0)) == 0
    marlin = padding_bytes(spec, 1, (8, 9))
    assert 0.8 * GiB < marlin < 0.9 * GiB
    assert padding_bytes(spec, 1, None) == 0  # GPU unknown: nothing assumed
    assert padding_bytes(fixture_spec("qwen3-8b"), 1, (8, 9)) == 0  # not MXFP4


def test_the_plan_counts_the_padding_in_the_weights_term() -> None:
    spec = fixture_spec("gpt-oss-20b", int(12.82 * GiB))
    cap = compute_capacity(rtx4090(spec, max_model_len=8192, vllm_version="0.21.0"))
    term = next(t for t in cap.terms if t.name == "weights")
    assert term.bytes == (spec.weights_bytes + padding_bytes(spec, 1, (8, 9))
                          + spec.rope_cache_bytes)
    assert "MXFP4" in term.note
