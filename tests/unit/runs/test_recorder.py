"""The run recorder's telemetry summary: a real Telemetry, downsampled with its mean, min and
max (the recorder itself runs end to end in tests/e2e/test_serve_profile_e2e.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kvpilot.core.hardware.sampler import GpuSample
from kvpilot.core.runs.recorder import downsample, telemetry_summary
from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig


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
