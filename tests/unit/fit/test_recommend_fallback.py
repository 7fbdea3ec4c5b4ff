"""Recommender ranking and rejections; fallbacks after each failure kind; calibration."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fitkit import rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import GpuTarget
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit import fallback
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
from kvpilot.core.fit.measurements import Measured, MeasurementRecord
from kvpilot.core.fit.recommend import Goal, recommend
from kvpilot.core.fit.support import check_support, fp8_kv_supported

RTX4090 = GpuTarget("NVIDIA GeForce RTX 4090", 24564 * MiB, 22_900 * MiB, (8, 9), 1.008e12, 165.2)
RTX3090 = GpuTarget("NVIDIA GeForce RTX 3090", 24576 * MiB, 23_800 * MiB, (8, 6), 0.936e12, 71.0)


def test_recommend_ranks_only_plans_that_serve_the_goal(qwen7b, llama8b):
    result = recommend(RTX4090, Goal(context_tokens=16384, users=4), [qwen7b, llama8b])
    assert result.candidates
    for c in result.candidates:
        assert c.capacity.fits
        assert c.capacity.max_concurrency >= 4
        assert c.capacity.max_model_len == 16384
        assert c.inputs.gpu_memory_utilization <= 0.95
        assert c.decode_tokens_per_s and c.decode_tokens_per_s > 10
        assert c.reason
    scores = [c.score for c in result.candidates]
    assert scores == sorted(scores, reverse=True)


def test_utilization_is_derived_from_free_memory(qwen7b):
    busy = replace(RTX4090, free_bytes=20_000 * MiB)
    util = recommend(busy, Goal(context_tokens=8192, users=2), [qwen7b]).candidates[0]
    assert util.inputs.gpu_memory_utilization < 0.85
    assert util.capacity.failure is None


def test_rejections_carry_the_reason_and_the_shortfall(llama8b):
    result = recommend(RTX4090, Goal(context_tokens=131072, users=8), [llama8b])
    assert not result.candidates
    (rejection,) = result.rejected
    assert rejection.shortfall_bytes and rejection.shortfall_bytes > GiB
    assert "GiB more KV" in rejection.reason


def test_quality_floor_rejects_4bit(qwen7b):
    from kvpilot.core.base.model_spec import Quantization

    awq = replace(qwen7b, model_id="q-awq", quantization=Quantization("awq", 4, 128),
                  weights_bytes=5_500_000_000)
    result = recommend(RTX4090, Goal(min_weight_bits=8), [awq])
    assert not result.candidates and "quality floor" in result.rejected[0].reason


def test_fp8_kv_only_where_the_gpu_supports_it(qwen7b):
    assert fp8_kv_supported((8, 9), 128, "0.11.0")
    assert not fp8_kv_supported((8, 6), 128, "0.11.0")  # Triton only, needs SM 8.9
    assert fp8_kv_supported((8, 6), 128, "0.33.0")  # FlashInfer
    assert not fp8_kv_supported((8, 6), 96, "0.33.0")
    assert not fp8_kv_supported((7, 5), 128, "0.33.0")
    bad = check_support(replace(rtx4090(qwen7b, kv_cache_dtype="fp8"),
                                compute_capability=(7, 5)))
    assert bad is not None and bad.kind == failures.UNSUPPORTED_KV_DTYPE


def test_full_catalog_ranking_is_deterministic():
    # how fast it is (the 200 ms goal) is benchmarks/recommend_speed.py's figure
    a = recommend(RTX4090, Goal(context_tokens=32768, users=4))
    b = recommend(RTX4090, Goal(context_tokens=32768, users=4))
    assert [c.model_id for c in a.candidates] == [c.model_id for c in b.candidates]
    assert len(a.candidates) + len(a.rejected) >= 30


def test_kv_too_small_falls_back_to_vllms_estimate_first(llama8b):
    inputs = rtx4090(llama8b, max_model_len=131072, max_num_seqs=4)
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    options = fallback.propose(cap.failure, inputs)
    assert options[0].predicted_fits
    kinds = [o.kind for o in options]
    assert fallback.SHORTER_CONTEXT in kinds and fallback.FP8_KV in kinds
    shorter = next(o for o in options if o.kind == fallback.SHORTER_CONTEXT)
    assert shorter.inputs.max_model_len % 16 == 0
    assert shorter.inputs.max_model_len <= cap.failure.estimated_max_model_len
    assert shorter.label.startswith(f"context {shorter.inputs.max_model_len:,}")
    assert "fits" in shorter.label


def test_observed_failure_uses_the_logged_estimate(qwen7b):
    inputs = rtx4090(qwen7b, max_model_len=1024, kv_cache_memory_bytes=262_144)
    observed = Failure(failures.KV_CACHE_TOO_SMALL, "from the log", estimated_max_model_len=128)
    options = fallback.propose(observed, inputs)
    shorter = next(o for o in options if o.kind == fallback.SHORTER_CONTEXT)
    assert shorter.inputs.max_model_len == 128


def test_free_memory_failure_offers_a_utilization_that_starts(qwen7b):
    inputs = rtx4090(qwen7b, gpu_free_bytes=21_000 * MiB, max_model_len=8192)
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    options = fallback.propose(cap.failure, inputs)
    util = next(o for o in options if o.kind == fallback.UTILIZATION)
    assert util.predicted_fits
    assert util.inputs.gpu_memory_utilization < 0.92


def test_graph_oom_offers_eager_and_unsupported_fp8_offers_auto(qwen7b):
    inputs = rtx4090(qwen7b, max_model_len=8192)
    oom = fallback.propose(Failure(failures.CUDA_OOM_GRAPHS, "oom"), inputs)
    assert any(o.kind == fallback.EAGER and o.inputs.enforce_eager for o in oom)
    fp8 = replace(inputs, kv_cache_dtype="fp8", compute_capability=(7, 5))
    opts = fallback.propose(Failure(failures.UNSUPPORTED_KV_DTYPE, "fp8"), fp8)
    assert opts[0].kind == fallback.AUTO_KV


def test_exact_measurement_replaces_the_model(qwen7b):
    inputs = rtx4090(qwen7b, max_model_len=32768)
    measured = Measured(measured_at="2026-11-29T09:00:00+00:00", source="launch",
                        available_kv_bytes=15 * GiB, kv_cache_tokens=280_000)
    cap = calibrated_capacity(inputs, [MeasurementRecord(key_for(inputs), measured)])
    assert cap.available_kv_bytes == 15 * GiB
    assert cap.kv_cache_tokens == 280_000
    term = {t.name: t for t in cap.terms}["kv_cache"]
    assert term.source == "measured" and "2026-11-29" in term.note


def test_neighbouring_measurement_corrects_by_its_offset(qwen7b):
    measured_inputs = rtx4090(qwen7b, max_model_len=32768)
    predicted = compute_capacity(measured_inputs).available_kv_bytes
    record = MeasurementRecord(
        key_for(measured_inputs),
        Measured(measured_at="2026-11-29T09:00:00+00:00", source="dry_run",
                 available_kv_bytes=predicted - GiB // 2, kv_cache_tokens=1),
    )
    other = rtx4090(qwen7b, max_model_len=16384, gpu_memory_utilization=0.85)
    plain = compute_capacity(other)
    corrected = calibrated_capacity(other, [record])
    assert corrected.available_kv_bytes == pytest.approx(
        plain.available_kv_bytes - GiB // 2, abs=1
    )
    term = {t.name: t for t in corrected.terms}["kv_cache"]
    assert "corrected" in term.note and term.source == "calibrated"


def test_feasibility_chart_rows(qwen7b):
    from kvpilot.core.fit.recommend import feasibility

    contexts = [1024, 8192, 32768, 131072]
    rows = feasibility(rtx4090(qwen7b), contexts)
    assert set(rows) == {"auto", "fp8"}
    bf16, fp8 = rows["auto"], rows["fp8"]
    assert bf16 == sorted(bf16, reverse=True)  # longer context, fewer users
    assert all(f >= b for f, b in zip(fp8, bf16, strict=True))
    assert fp8[1] == pytest.approx(2 * bf16[1], rel=0.01)
