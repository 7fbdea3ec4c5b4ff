"""Energy over a window from the NVML counter or the integrated power draw, J/token, throttling."""

from __future__ import annotations

import pytest
from fakes import pynvml_stub

from kvpilot.core.hardware.energy import gpu_energy, joules_per_token
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.sampler import GpuSample, GpuSampler


def _samples(powers_w, *, energy_start_mj=None, masks=None, dt_s=0.5, t0=100.0):
    """Samples ``dt_s`` apart; the counter (when given) grows by each interval's mean power."""
    out = []
    energy = energy_start_mj
    for i, power in enumerate(powers_w):
        if i and energy is not None:
            energy += (powers_w[i - 1] + power) / 2 * dt_s * 1000
        out.append(GpuSample(
            t_monotonic_s=t0 + i * dt_s, gpu_index=0, power_w=power,
            energy_mj=None if energy is None else round(energy),
            throttle_reasons_mask=None if masks is None else masks[i],
        ))
    return out


def test_counter_gives_the_energy_of_the_window() -> None:
    samples = _samples([300.0] * 11, energy_start_mj=5_000_000)  # 100.0 .. 105.0 s
    got = gpu_energy(samples, 101.0, 104.0, tokens=600)
    assert got is not None and got.source == "counter"
    assert got.energy_j == pytest.approx(900.0)
    assert got.mean_power_w == pytest.approx(300.0) and got.duration_s == 3.0
    assert got.j_per_token == pytest.approx(1.5)
    assert got.samples == 7 and got.throttled is None and got.throttle_reasons == ()


def test_window_between_samples_scales_the_bracketing_counter_delta() -> None:
    samples = _samples([200.0, 200.0, 200.0], energy_start_mj=0)  # 100, 100.5, 101
    got = gpu_energy(samples, 100.2, 100.7)
    assert got is not None and got.energy_j == pytest.approx(100.0)


def test_without_a_counter_power_is_integrated() -> None:
    samples = _samples([100.0, 200.0, 300.0, 300.0, 300.0])  # 100 .. 102 s
    got = gpu_energy(samples, 100.0, 102.0, tokens=0)
    assert got is not None and got.source == "integrated"
    # trapezoids: 0.5 x (150 + 250 + 300 + 300)
    assert got.energy_j == pytest.approx(500.0)
    assert got.j_per_token is None
    # the draw is interpolated at the window's edges
    inner = gpu_energy(samples, 100.25, 100.75)
    assert inner is not None and inner.energy_j == pytest.approx(0.5 * 200.0)


def test_a_counter_that_restarts_falls_back_to_integration() -> None:
    samples = _samples([100.0, 100.0, 100.0], energy_start_mj=1_000_000)
    samples[-1] = GpuSample(t_monotonic_s=101.0, gpu_index=0, power_w=100.0, energy_mj=10)
    got = gpu_energy(samples, 100.0, 101.0)
    assert got is not None and got.source == "integrated" and got.energy_j == pytest.approx(100.0)


def test_throttle_in_the_window_is_flagged_with_words() -> None:
    samples = _samples([440.0] * 6, energy_start_mj=0, masks=[1, 1, 4, 0x20, 1, 0x8])
    got = gpu_energy(samples, 100.0, 101.5)
    assert got is not None and got.throttled is True
    assert got.throttle_reasons == ("power cap", "thermal")
    assert got.throttle_reasons_mask == 0x25
    calm = gpu_energy(samples, 100.0, 100.5)
    assert calm is not None and calm.throttled is False and calm.throttle_reasons == ()


def test_failed_samples_are_ignored_and_no_coverage_is_none() -> None:
    samples = _samples([300.0] * 3)
    lost = GpuSample(t_monotonic_s=100.25, gpu_index=0, lost=True, power_w=9999.0)
    got = gpu_energy([samples[0], lost, *samples[1:]], 100.0, 101.0)
    assert got is not None and got.energy_j == pytest.approx(300.0)
    assert gpu_energy(samples[:1], 100.0, 101.0) is None
    assert gpu_energy([], 100.0, 101.0) is None
    with pytest.raises(ValueError, match="end after"):
        gpu_energy(samples, 101.0, 101.0)
    with pytest.raises(ValueError, match="tokens"):
        gpu_energy(samples, 100.0, 101.0, tokens=-1)
    assert joules_per_token(10.0, 4) == 2.5 and joules_per_token(10.0, 0) is None


def test_counter_and_integral_agree_on_the_recorded_throttling_card() -> None:
    now = [50.0]
    base = pynvml_stub.load("throttling")
    replay = RecordedNvml(base.snapshot, source="<test>", clock=lambda: now[0])
    sampler = GpuSampler(nvml_module=replay)
    samples = []
    for _ in range(13):
        sample = sampler.sample_once()
        samples.append(GpuSample(**{**sample.__dict__, "t_monotonic_s": now[0]}))
        now[0] += 0.1
    sampler.close()
    counter = gpu_energy(samples, 50.0, 51.2, tokens=120)
    no_counter = [GpuSample(**{**s.__dict__, "energy_mj": None}) for s in samples]
    integrated = gpu_energy(no_counter, 50.0, 51.2, tokens=120)
    assert counter is not None and integrated is not None
    assert counter.source == "counter" and integrated.source == "integrated"
    assert counter.energy_j == pytest.approx(integrated.energy_j, rel=0.02)
    assert 440 < counter.mean_power_w < 452
    assert counter.throttled and counter.throttle_reasons == ("power cap", "thermal")
