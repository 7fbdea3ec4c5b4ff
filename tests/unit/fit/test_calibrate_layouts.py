"""A measured launch calibrates neighbouring settings only with the same parallel layout: with
another tensor-parallel or pipeline size the weights, activation and NCCL terms split otherwise."""

from __future__ import annotations

from dataclasses import replace

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.plan import Capacity
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
from kvpilot.core.fit.measurements import Measured, MeasurementRecord

LLAMA_8B = fixture_spec("llama-3.1-8b-instruct", weights_bytes=int(14.99 * GiB))


def _kv_source(cap: Capacity) -> str:
    return {t.name: t.source for t in cap.terms}["kv_cache"]


def test_a_pipeline_measurement_calibrates_only_pipeline_plans() -> None:
    measured_inputs = rtx4090(LLAMA_8B, max_model_len=8192, pipeline_parallel_size=2)
    predicted = compute_capacity(measured_inputs).available_kv_bytes
    record = MeasurementRecord(key_for(measured_inputs), Measured(
        measured_at="2026-12-01T09:00:00+00:00", source="launch",
        available_kv_bytes=predicted - GiB // 2, kv_cache_tokens=None))
    # another context, the same layout: the measured offset carries over
    same_layout = replace(measured_inputs, max_model_len=16384)
    calibrated = calibrated_capacity(same_layout, [record])
    assert _kv_source(calibrated) == "calibrated"
    model = compute_capacity(same_layout).available_kv_bytes
    assert calibrated.available_kv_bytes == model - GiB // 2
    # one GPU, the same tensor-parallel size: the model's own figure
    single = replace(measured_inputs, pipeline_parallel_size=1, max_model_len=16384)
    assert _kv_source(calibrated_capacity(single, [record])) != "calibrated"
    assert calibrated_capacity(single, [record]).available_kv_bytes == (
        compute_capacity(single).available_kv_bytes)
