"""The run recorder's telemetry summary: a real Telemetry, downsampled with its mean, min and
max (the recorder itself runs end to end in tests/e2e/test_serve_profile_e2e.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from kvpilot.core.hardware.sampler import GpuSample
from kvpilot.core.runs.record import (
    STOPPED,
    LevelSummary,
    RunRecord,
)
from kvpilot.core.runs.recorder import downsample, telemetry_summary
from kvpilot.core.telemetry import Telemetry, TelemetryConfig


def _level(c: int, tps: float, ttft: float, jpt: float | None = None) -> LevelSummary:
    return LevelSummary(concurrency=c, requests_ok=8, errors=0, output_tokens_per_s=tps,
                        requests_per_s=tps / 100, ttft_p50_s=ttft, ttft_p99_s=ttft * 2,
                        tpot_p50_s=0.02, tpot_p99_s=0.03, j_per_token=jpt,
                        throttled=jpt is not None and jpt > 1, throttle_reasons=(
                            ("power cap",) if jpt is not None and jpt > 1 else ()))


def _record(run_id: str, **kw: object) -> RunRecord:
    values: dict[str, object] = dict(
        id=run_id, started_at="2026-01-01T10:00:00Z", model="/models/tiny", state=STOPPED,
        owner_pid=os.getpid(), settings={"max_model_len": 4096, "kv_cache_dtype": "auto"},
        predicted={"kv_cache_tokens": 100_000, "max_concurrency": 24.4},
        reported={"kv_cache_tokens": 98_304, "max_concurrency": 24.0}, startup_s=42.0,
    )
    values.update(kw)
    return RunRecord(**values)  # type: ignore[arg-type]



def test_telemetry_summary_downsamples_a_real_telemetry() -> None:
    clock = [0.0]
    tel = Telemetry(TelemetryConfig(), clock=lambda: clock[0])
    for i in range(1000):
        clock[0] = i * 0.1
        tel.add_gpu_sample(GpuSample(t_monotonic_s=i * 0.1, gpu_index=0,
                                     power_w=300.0 + (i % 10), temperature_c=60.0 + i / 100))
    summary = telemetry_summary(tel, points=50)
    power = summary["power_w"]
    assert len(power.y) == 50 and power.unit == "W"
    assert power.min == 300.0 and power.max == 309.0
    assert abs(power.mean - 304.5) < 0.01
    assert summary["temperature_c"].max == pytest.approx(69.99)
    assert "generation_tokens_per_s" not in summary  # no vLLM sample: left out
    t, y = downsample(np.array([0.0, 1.0]), np.array([np.nan, 2.0]))
    assert t == (0.0, 1.0) and y == (None, 2.0)
