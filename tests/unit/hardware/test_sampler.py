"""The background sampler: rate, bounded history, lost GPU, no driver, never blocks, never dies."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from fakes import pynvml_stub

from kvpilot.core.hardware.problems import ProblemKind
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.sampler import GpuSample, GpuSampler, combine_samples

MiB = 1024**2
Fake = Callable[[str], RecordedNvml]


def _wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    event = threading.Event()
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        event.wait(0.01)


def test_sample_once_reads_every_dynamic_field(fake: Fake) -> None:
    sampler = GpuSampler(nvml_module=fake("rtx4090-desktop"))
    sample = sampler.sample_once()
    sampler.close()
    assert sample.ok and not sample.lost and sample.error is None
    assert sample.memory_total_bytes == 24564 * MiB
    assert sample.memory_used_bytes == 1536 * MiB
    assert sample.memory_reserved_bytes == 346 * MiB
    assert sample.memory_free_bytes == (24564 - 346 - 1536) * MiB
    assert (sample.gpu_util_percent, sample.mem_util_percent) == (3, 8)
    assert sample.power_w == pytest.approx(31.2)
    assert sample.temperature_c == 41
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz) == (210, 405)
    assert dict(sample.process_used_bytes) == {2211: 412 * MiB, 2468: 286 * MiB, 3120: 802 * MiB}
    assert sample.read_s >= 0
    with pytest.raises(TypeError):
        sample.process_used_bytes[1] = 0  # type: ignore[index]
    with pytest.raises(AttributeError):
        sample.power_w = 1.0  # type: ignore[misc]


def test_one_nvml_pass_per_tick(fake: Fake) -> None:
    replay = fake("rtx4090-desktop")
    sampler = GpuSampler(nvml_module=replay)
    sampler.sample_once()  # opens the session
    before = replay.call_count
    sampler.sample_once()
    per_tick = replay.call_count - before
    sampler.close()
    # memory, utilization, temperature, power draw and limit, energy, throttle mask, SM clock,
    # memory clock, two process lists
    assert per_tick == 11


def test_sample_has_power_limit_throttle_mask_and_energy(fake: Fake) -> None:
    sampler = GpuSampler(nvml_module=fake("throttling"))
    first, second, *_, fourth = [sampler.sample_once() for _ in range(4)]
    sampler.close()
    assert first.power_limit_w == pytest.approx(450.0)
    assert (first.throttle_reasons_mask, fourth.throttle_reasons_mask) == (4, 32)
    assert first.energy_mj == 10_368_000_000
    assert second.energy_mj is not None and second.energy_mj >= first.energy_mj


def test_older_mask_function_is_used_and_remembered(fake: Fake) -> None:
    replay = fake("throttling")
    replay.snapshot["devices"][0]["errors"] = {
        "nvmlDeviceGetCurrentClocksEventReasons": "FUNCTION_NOT_FOUND"
    }
    sampler = GpuSampler(nvml_module=replay)
    assert sampler.sample_once().throttle_reasons_mask == 4
    before = replay.call_count
    assert sampler.sample_once().throttle_reasons_mask == 4
    assert replay.call_count - before == 11  # the newer name is not asked again
    sampler.close()


def test_combined_samples_sum_limits_and_energy_and_or_masks() -> None:
    a = GpuSample(0.0, 0, power_w=300.0, power_limit_w=450.0, throttle_reasons_mask=0x4,
                  energy_mj=1000)
    b = GpuSample(0.0, 1, power_w=200.0, power_limit_w=350.0, throttle_reasons_mask=0x21,
                  energy_mj=500)
    both = combine_samples([a, b])
    assert both.power_limit_w == 800.0 and both.energy_mj == 1500
    assert both.throttle_reasons_mask == 0x25
    unknown = combine_samples([a, GpuSample(0.0, 1)])
    assert unknown.power_limit_w is None and unknown.energy_mj is None
    assert unknown.throttle_reasons_mask == 0x4  # what is known still says "power cap"
    assert combine_samples([GpuSample(0.0, 0), GpuSample(0.0, 1)]).throttle_reasons_mask is None


def test_wsl2_process_memory_is_none(fake: Fake) -> None:
    sampler = GpuSampler(nvml_module=fake("rtx4090-wsl2"))
    sample = sampler.sample_once()
    sampler.close()
    assert dict(sample.process_used_bytes) == {812: None, 37: None}


def test_thread_samples_at_rate_with_bounded_history(fake: Fake) -> None:
    got: list[GpuSample] = []
    sampler = GpuSampler(
        rate_hz=10, nvml_module=fake("rtx4090-desktop"), on_sample=got.append, history_len=5
    )
    with sampler:
        assert sampler.running
        _wait_for(lambda: len(got) >= 8)
    assert not sampler.running
    history = sampler.history()
    assert len(history) == 5
    assert history[-1] is sampler.latest()
    times = [s.t_monotonic_s for s in got[:8]]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # a late tick on a busy machine is followed by a shorter one (the schedule keeps its rate),
    # so the rate is judged on the mean gap: about 0.1 s at 10 Hz, never a burst or a stall
    assert all(g > 0 for g in gaps), gaps
    assert 0.05 < sum(gaps) / len(gaps) < 0.5, gaps
    assert [s.gpu_util_percent for s in got[:6]] == [3, 5, 2, 9, 4, 6]


def test_gpu_lost_mid_sampling_is_reported_and_sampling_continues(fake: Fake) -> None:
    got: list[GpuSample] = []
    sampler = GpuSampler(rate_hz=10, nvml_module=fake("gpu-lost"), on_sample=got.append)
    sampler.start()
    try:
        _wait_for(lambda: sum(s.lost for s in got) >= 3)
        assert sampler.running
    finally:
        sampler.stop()
    first_lost = next(i for i, s in enumerate(got) if s.lost)
    assert first_lost > 0 and all(s.ok for s in got[:first_lost])
    assert all(s.lost for s in got[first_lost:])
    lost = got[first_lost]
    assert lost.problem is not None and lost.problem.kind is ProblemKind.GPU_LOST
    assert lost.error and "reboot" in lost.error
    assert lost.memory_used_bytes is None and lost.power_w is None


def test_no_driver_gives_error_samples_and_keeps_running(fake: Fake) -> None:
    sampler = GpuSampler(rate_hz=10, nvml_module=fake("no-driver"))
    with sampler:
        _wait_for(lambda: len(sampler.history()) >= 3)
        assert sampler.running
    sample = sampler.latest()
    assert sample is not None and not sample.ok and not sample.lost
    assert sample.problem is not None and sample.problem.kind is ProblemKind.LIBRARY_NOT_FOUND


def test_init_is_retried_only_every_few_seconds(fake: Fake) -> None:
    replay = fake("no-driver")
    sampler = GpuSampler(nvml_module=replay)
    for _ in range(5):
        sampler.sample_once()
    assert replay.call_count == 1  # one failed nvmlInit, then the remembered problem


def test_missing_index_is_reported(fake: Fake) -> None:
    sampler = GpuSampler(index=3, nvml_module=fake("rtx4090-desktop"))
    sample = sampler.sample_once()
    assert sample.problem is not None and sample.problem.kind is ProblemKind.NO_DEVICES
    assert "GPU 3" in (sample.problem.detail or "")


def test_listener_exceptions_do_not_stop_sampling(fake: Fake) -> None:
    def bad(sample: GpuSample) -> None:
        raise RuntimeError("listener bug")

    sampler = GpuSampler(rate_hz=10, nvml_module=fake("rtx4090-desktop"), on_sample=bad)
    with sampler:
        _wait_for(lambda: len(sampler.history()) >= 3)
        assert sampler.running


def test_unexpected_errors_become_error_samples(fake: Fake) -> None:
    replay = fake("rtx4090-desktop")

    def broken(handle: Any) -> Any:
        raise ZeroDivisionError("driver returned garbage")

    replay.nvmlDeviceGetUtilizationRates = broken  # type: ignore[method-assign]
    sampler = GpuSampler(nvml_module=replay)
    sample = sampler.sample_once()
    sampler.close()
    assert sample.error is not None and "ZeroDivisionError" in sample.error


def test_start_never_blocks_on_a_slow_driver() -> None:
    """A driver whose init hangs until released: start() returns while the init still waits
    (a start that waited for it would return only once the 5 s wait ran out), whatever the
    machine's load."""
    release = threading.Event()
    init_done = threading.Event()

    class SlowInit(RecordedNvml):
        def nvmlInit(self) -> None:
            release.wait(5)
            super().nvmlInit()
            init_done.set()

    slow = SlowInit(pynvml_stub.load("rtx4090-desktop").snapshot)
    sampler = GpuSampler(nvml_module=slow)
    sampler.start()
    returned_before_init = not init_done.is_set()
    assert sampler.latest() is None
    release.set()
    sampler.stop(timeout_s=3)
    assert returned_before_init


def test_stop_releases_nvml(fake: Fake) -> None:
    replay = fake("rtx4090-desktop")
    sampler = GpuSampler(rate_hz=10, nvml_module=replay)
    with sampler:
        _wait_for(lambda: sampler.latest() is not None)
    assert replay.init_count == 0


@pytest.mark.parametrize("rate", [0.0, 0.05, 10.5, -1.0])
def test_rate_is_validated(rate: float) -> None:
    with pytest.raises(ValueError, match=r"between 0\.1 and 10\.0 Hz"):
        GpuSampler(rate_hz=rate)
    sampler = GpuSampler(rate_hz=2.0)
    with pytest.raises(ValueError, match="between"):
        sampler.set_rate(rate)


def test_set_rate_applies_to_a_running_sampler(fake: Fake) -> None:
    got: list[GpuSample] = []
    sampler = GpuSampler(rate_hz=0.1, nvml_module=fake("rtx3090-idle"), on_sample=got.append)
    with sampler:
        _wait_for(lambda: len(got) >= 1)
        sampler.set_rate(10)  # without this the next sample would come 10 s later
        assert sampler.rate_hz == 10
        _wait_for(lambda: len(got) >= 4, timeout_s=2)


def test_stop_is_prompt_at_a_slow_rate(fake: Fake) -> None:
    sampler = GpuSampler(rate_hz=0.1, nvml_module=fake("rtx3090-idle"))
    sampler.start()
    _wait_for(lambda: sampler.latest() is not None)
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 1.0 and not sampler.running


def test_history_len_is_validated() -> None:
    with pytest.raises(ValueError, match="history_len"):
        GpuSampler(history_len=0)
