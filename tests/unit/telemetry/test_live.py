"""Telemetry: ring buffers, rates across resets and gaps, windowed percentiles, pressure, export."""

from __future__ import annotations

import csv
import json
import math
import threading
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from kvpilot.core.telemetry.live import (
    GPU_SERIES,
    SERIES,
    VLLM_SERIES,
    Telemetry,
    TelemetryConfig,
    histogram_quantile,
)
from kvpilot.core.vllm.metrics import (
    HistogramSnapshot,
    MetricsSample,
    ScrapeError,
    ScrapeErrorKind,
    parse_metrics,
)

BOUNDS = (0.1, 0.5, 1.0, 2.0, math.inf)


def hist(counts):
    return HistogramSnapshot(BOUNDS, tuple(float(c) for c in counts), 0.0, float(counts[-1]))


def sample(
    t,
    gen=0.0,
    prompt=0.0,
    *,
    running=1.0,
    waiting=0.0,
    kv=0.2,
    preempt=0.0,
    pq=0.0,
    ph=0.0,
    success=None,
    ttft=(0, 0, 0, 0, 0),
):
    return MetricsSample(
        t_monotonic_s=t,
        has_vllm_metrics=True,
        running=running,
        waiting=waiting,
        kv_usage_frac=kv,
        prompt_tokens_total=prompt,
        generation_tokens_total=gen,
        preemptions_total=preempt,
        prefix_queries_total=pq,
        prefix_hits_total=ph,
        request_success_by_reason=dict(success or {}),
        ttft=hist(ttft),
        cache_config={"kv_cache_size_tokens": "4096"},
        model_name="m",
    )


def make(clock_t=None, **cfg):
    clock = [0.0] if clock_t is None else clock_t
    return Telemetry(TelemetryConfig(**cfg), clock=lambda: clock[0]), clock


# --- histogram_quantile --------------------------------------------------------------------


def test_histogram_quantile_interpolates_like_prometheus():
    counts = (10, 20, 30, 30, 30)
    assert histogram_quantile(0.5, BOUNDS, counts) == pytest.approx(0.3)
    assert histogram_quantile(0.99, BOUNDS, counts) == pytest.approx(0.5 + 0.5 * 9.7 / 10)
    assert histogram_quantile(0.2, BOUNDS, counts) == pytest.approx(0.06)  # first bucket from 0
    assert histogram_quantile(1.0, BOUNDS, counts) == pytest.approx(1.0)


def test_histogram_quantile_edges():
    assert math.isnan(histogram_quantile(0.5, BOUNDS, (0, 0, 0, 0, 0)))
    assert math.isnan(histogram_quantile(0.5, BOUNDS, ()))
    assert math.isnan(histogram_quantile(1.5, BOUNDS, (1, 1, 1, 1, 1)))
    # everything above the last finite bound: that bound, as Prometheus does
    assert histogram_quantile(0.9, BOUNDS, (0, 0, 0, 0, 5)) == 2.0


# --- rates ---------------------------------------------------------------------------------


def test_generation_and_prompt_rates():
    tel, _ = make(rate_window_s=2.0)
    for i in range(10):
        tel.add_vllm_sample(sample(i * 0.5, gen=50.0 * i, prompt=10.0 * i))
    _, gen = tel.series("generation_tokens_per_s")
    _, prompt = tel.series("prompt_tokens_per_s")
    assert math.isnan(gen[0])  # one sample is no rate
    np.testing.assert_allclose(gen[1:], 100.0)
    np.testing.assert_allclose(prompt[1:], 20.0)
    assert tel.latest()["generation_tokens_per_s"] == pytest.approx(100.0)
    assert tel.latest().generation_tokens_session == 450.0


def test_counter_reset_is_not_a_negative_rate():
    tel, _ = make(rate_window_s=0.5)  # one interval per rate
    tel.add_vllm_sample(sample(0.0, gen=1000.0))
    tel.add_vllm_sample(sample(0.5, gen=1050.0))
    tel.add_vllm_sample(sample(1.0, gen=30.0))  # server restarted: counted from zero
    tel.add_vllm_sample(sample(1.5, gen=80.0))
    _, gen = tel.series("generation_tokens_per_s")
    assert np.all(gen[1:] >= 0)
    np.testing.assert_allclose(gen[1:], [100.0, 60.0, 100.0])
    assert tel.latest().generation_tokens_session == 50.0 + 30.0 + 50.0


def test_scrape_gap_is_nan_and_rate_spans_it():
    tel, _ = make(rate_window_s=0.6)
    tel.add_vllm_sample(sample(0.0, gen=0.0))
    tel.add_vllm_sample(sample(0.5, gen=50.0))
    tel.add_scrape_error(1.0, ScrapeError(ScrapeErrorKind.TIMEOUT, "GET /metrics timed out"))
    assert tel.latest().status_message == "no metrics: GET /metrics timed out"
    tel.add_vllm_sample(sample(1.5, gen=150.0))  # 100 tokens over the 1 s since the last good one
    t, gen = tel.series("generation_tokens_per_s")
    _, running = tel.series("running")
    np.testing.assert_allclose(t, [0.0, 0.5, 1.0, 1.5])
    assert math.isnan(gen[2]) and math.isnan(running[2])
    assert gen[3] == pytest.approx(100.0)
    assert tel.latest().last_scrape_error is None


def test_disabled_stats_is_a_gap_with_a_message():
    tel, _ = make()
    tel.add_vllm_sample(MetricsSample(t_monotonic_s=1.0, has_vllm_metrics=False))
    summary = tel.latest()
    assert summary.has_vllm_metrics is False
    assert "--disable-log-stats" in (summary.status_message or "")
    assert summary["running"] is None and summary["kv_usage_frac"] is None
    _, kv = tel.series("kv_usage_frac")
    assert kv.size == 1 and math.isnan(kv[0])


# --- windows -------------------------------------------------------------------------------


def test_percentiles_follow_the_sliding_window():
    tel, _ = make(window_s=10.0)
    t, fast, slow = 0.0, 0, 0
    tel.add_vllm_sample(sample(t))
    for _ in range(20):  # 10 s of fast requests: all under 0.1 s
        t += 0.5
        fast += 2
        tel.add_vllm_sample(sample(t, ttft=(fast, fast, fast, fast, fast)))
    assert tel.latest()["ttft_p99_s"] < 0.1
    for _ in range(40):  # 20 s of slow requests between 1 and 2 s
        t += 0.5
        slow += 2
        c = (fast, fast, fast, fast + slow, fast + slow)
        tel.add_vllm_sample(sample(t, ttft=c))
    last = tel.latest()
    # only the slow ones are inside the window now
    assert 1.0 < last["ttft_p50_s"] < last["ttft_p90_s"] < last["ttft_p99_s"] <= 2.0
    assert last["ttft_p50_s"] == pytest.approx(1.5)
    assert last["itl_p50_s"] is None  # no itl histogram in these samples


def test_percentiles_with_no_new_requests_are_nan():
    tel, _ = make(window_s=2.0)
    for i in range(10):
        tel.add_vllm_sample(sample(i * 0.5, ttft=(5, 5, 5, 5, 5)))
    assert tel.latest()["ttft_p50_s"] is None
    _, p50 = tel.series("ttft_p50_s")
    assert np.all(np.isnan(p50))


def test_real_payload_sequence(payload):
    tel, _ = make(window_s=60.0, rate_window_s=60.0)
    for t, name in ((0.0, "before"), (10.0, "during"), (20.0, "after")):
        tel.add_vllm_sample(parse_metrics(payload(name), t))
    last = tel.latest()
    assert last.generation_tokens_session == 32961.0
    assert last["generation_tokens_per_s"] == pytest.approx(32961.0 / 20.0)
    assert last["prompt_tokens_per_s"] == pytest.approx(657.0 / 20.0)
    assert last["success_rate"] == 1.0
    assert last.finish_reason_fractions["length"] == 1.0
    assert last["prefix_hit_rate"] == 0.0
    # 51 TTFTs: 15 <= 10 ms, 24 <= 20 ms ... median in the 20-40 ms bucket
    assert 0.02 < last["ttft_p50_s"] < 0.04
    assert last["e2e_p99_s"] > last["e2e_p50_s"] > 0
    assert last["itl_p50_s"] < 0.01
    assert last.cache_config["num_gpu_blocks"] == "8192"
    assert last.model_name == "/data/tinymodel"


def test_preemptions_prefix_and_success_rates():
    tel, _ = make(window_s=10.0)
    tel.add_vllm_sample(sample(0.0))
    tel.add_vllm_sample(
        sample(
            5.0, preempt=3.0, pq=100.0, ph=25.0, success={"stop": 6.0, "length": 2.0, "abort": 2.0}
        )
    )
    last = tel.latest()
    assert last["preemptions_per_min"] == pytest.approx(3.0 / 5.0 * 60.0)
    assert last["prefix_hit_rate"] == pytest.approx(0.25)
    assert last["success_rate"] == pytest.approx(0.8)
    assert last.finish_reason_fractions == pytest.approx({"stop": 0.6, "length": 0.2, "abort": 0.2})


# --- ring buffers --------------------------------------------------------------------------


def test_ring_is_bounded_and_ordered():
    tel, clock = make(capacity=16)
    size = tel.nbytes
    for i in range(100):
        tel.add_vllm_sample(sample(float(i), running=float(i)))
        tel.add_gpu_sample(SimpleNamespace(t_monotonic_s=float(i), memory_used_bytes=i * 1e6))
    assert tel.nbytes == size
    t, y = tel.series("running")
    np.testing.assert_array_equal(t, np.arange(84, 100, dtype=float))
    np.testing.assert_array_equal(y, t.astype(np.float32))
    clock[0] = 99.0
    t, y = tel.series("running", window_s=5.0)
    np.testing.assert_array_equal(t, [94, 95, 96, 97, 98, 99])
    t, y = tel.series("memory_used_bytes", window_s=20.5)  # wraps around the ring's end
    np.testing.assert_array_equal(t, np.arange(84, 100))
    t, y = tel.series("running", window_s=0.5, now_s=200.0)
    assert t.size == 0 and y.size == 0


def test_series_before_wrap_and_unknown_name():
    tel, clock = make(capacity=100)
    for i in range(5):
        tel.add_vllm_sample(sample(float(i), kv=i / 10))
    clock[0] = 4.0
    t, y = tel.series("kv_usage_frac", window_s=2.0)
    np.testing.assert_array_equal(t, [2, 3, 4])
    np.testing.assert_allclose(y, [0.2, 0.3, 0.4], rtol=1e-6)
    with pytest.raises(KeyError, match="unknown telemetry series 'kv_usage'"):
        tel.series("kv_usage")


def test_series_returns_copies():
    tel, _ = make()
    tel.add_vllm_sample(sample(0.0, running=2.0))
    _, y = tel.series("running")
    y[0] = 99.0
    assert tel.series("running")[1][0] == 2.0


def test_24h_at_2hz_memory_is_bounded():
    tel = Telemetry()
    assert tel.config.capacity == 172_800
    assert tel.nbytes < 50 * 1024**2
    with pytest.raises(ValueError, match="capacity"):
        TelemetryConfig(capacity=1)


def test_the_rings_pages_become_resident_only_as_rows_are_written():
    """A new window reserves its 24-hour rings without writing them (they cost 22 MB of RSS and
    tens of milliseconds before the first paint when they were filled with NaN up front)."""
    import psutil

    me = psutil.Process()
    rss0 = me.memory_info().rss
    tels = [Telemetry() for _ in range(4)]
    grown = me.memory_info().rss - rss0
    assert sum(t.nbytes for t in tels) > 60 * 1024**2
    assert grown < 8 * 1024**2, grown
    tel = tels[0]
    for i in range(7200):  # one hour at 2 Hz
        tel.add_gpu_sample(SimpleNamespace(t_monotonic_s=float(i), gpu_index=0,
                                           memory_used_bytes=i, memory_total_bytes=24 << 30))
    t, y = tel.series("memory_used_bytes")
    assert t.size == 7200 and y[-1] == 7199
    assert me.memory_info().rss - rss0 < 16 * 1024**2
    tel.clear()
    assert tel.series("memory_used_bytes")[0].size == 0


def test_concurrent_writers_and_reader():
    tel, clock = make(capacity=500)
    stop = threading.Event()
    problems: list[str] = []

    def writer():
        for i in range(3000):
            tel.add_vllm_sample(sample(i * 0.01, gen=i * 5.0))
            tel.add_gpu_sample(SimpleNamespace(t_monotonic_s=i * 0.01, gpu_util_percent=50.0))
        stop.set()

    def reader():
        while not stop.is_set():
            clock[0] = 1e9
            t, y = tel.series("generation_tokens_per_s")
            if t.shape != y.shape or np.any(np.diff(t) < 0):
                problems.append("torn read")
            tel.latest()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not problems
    assert tel.series("running")[0].size == 500


# --- GPU samples ---------------------------------------------------------------------------


def gpu(t, used, total=24e9, util=80.0, procs=None, **extra):
    return SimpleNamespace(
        t_monotonic_s=t,
        memory_used_bytes=used,
        memory_total_bytes=total,
        gpu_util_percent=util,
        power_w=300.0,
        temperature_c=70.0,
        sm_clock_mhz=2500.0,
        process_used_bytes=procs,
        **extra,
    )


def test_gpu_samples_and_vllm_process_tree():
    tel, _ = make()
    tel.set_vllm_pids([100, 101])
    tel.add_gpu_sample(gpu(1.0, 20e9, procs={100: 1e9, 101: 17e9, 555: 2e9}))
    last = tel.latest()
    assert last["vllm_memory_bytes"] == 18e9
    assert last["other_memory_bytes"] == 2e9
    assert last["power_w"] == 300.0 and last["sm_clock_mhz"] == 2500.0
    _, used = tel.series("memory_used_bytes")
    assert used[0] == pytest.approx(20e9, rel=1e-6)


def test_gpu_sample_with_process_objects_and_missing_fields():
    tel, _ = make()
    tel.set_vllm_pids([7])
    procs = [SimpleNamespace(pid=7, used_bytes=3e9), SimpleNamespace(pid=8, used_bytes=None)]
    tel.add_gpu_sample(
        SimpleNamespace(t_monotonic_s=0.0, memory_used_bytes=5e9, processes=procs, power_w=None)
    )
    last = tel.latest()
    assert last["vllm_memory_bytes"] == 3e9
    assert last["power_w"] is None and last["temperature_c"] is None
    tel.add_gpu_gap(1.0)
    _, used = tel.series("memory_used_bytes")
    assert math.isnan(used[1])


def test_no_pid_set_means_unknown_vllm_memory():
    tel, _ = make()
    tel.add_gpu_sample(gpu(0.0, 10e9, procs={1: 5e9}))
    assert tel.latest()["vllm_memory_bytes"] is None


# --- pressure signals ----------------------------------------------------------------------


def kinds(tel):
    return {p.kind for p in tel.latest().pressure}


def test_kv_full_with_waiting():
    tel, _ = make()
    tel.add_vllm_sample(sample(0.0, kv=0.95, waiting=0.0))
    assert "kv_full" not in kinds(tel)
    tel.add_vllm_sample(sample(0.5, kv=0.95, waiting=3.0))
    sig = next(p for p in tel.latest().pressure if p.kind == "kv_full")
    assert "max-num-seqs" in sig.fix and "fp8" in sig.fix and "max-model-len" in sig.fix
    assert sig.value == pytest.approx(0.95)


def test_preemptions_rising():
    tel, _ = make(window_s=10.0)
    tel.add_vllm_sample(sample(0.0, preempt=5.0))
    tel.add_vllm_sample(sample(1.0, preempt=5.0))
    assert "preemptions" not in kinds(tel)
    tel.add_vllm_sample(sample(2.0, preempt=7.0))
    assert "preemptions" in kinds(tel)
    tel.add_vllm_sample(sample(20.0, preempt=7.0))  # the increase left the window
    assert "preemptions" not in kinds(tel)


def test_preemptions_at_full_utilization_do_not_advise_raising_it():
    tel, _ = make(window_s=10.0)
    unset = {"kv_cache_size_tokens": "4096", "gpu_memory_utilization": "None"}  # vLLM 0.34
    tel.add_vllm_sample(replace(sample(0.0, preempt=5.0), cache_config=unset))
    tel.add_vllm_sample(replace(sample(1.0, preempt=7.0), cache_config=unset))
    sig = next(p for p in tel.latest().pressure if p.kind == "preemptions")
    assert "gpu-memory-utilization" not in sig.fix and "max-num-seqs" in sig.fix
    capped = {"kv_cache_size_tokens": "4096", "gpu_memory_utilization": "0.83"}
    tel.add_vllm_sample(replace(sample(2.0, preempt=9.0), cache_config=capped))
    sig = next(p for p in tel.latest().pressure if p.kind == "preemptions")
    assert "raise --gpu-memory-utilization" in sig.fix


def test_ttft_over_goal_with_idle_gpu_is_cpu_bound():
    tel, _ = make(window_s=10.0, ttft_goal_s=1.0)
    tel.add_vllm_sample(sample(0.0))
    tel.add_vllm_sample(sample(1.0, ttft=(0, 0, 0, 10, 10)))  # all between 1 and 2 s
    assert "cpu_bound" not in kinds(tel)  # no GPU data: cannot tell
    tel.add_gpu_sample(gpu(1.0, 10e9, util=95.0))
    assert "cpu_bound" not in kinds(tel)  # GPU busy: it is GPU bound
    for i in range(5):
        tel.add_gpu_sample(gpu(2.0 + i, 10e9, util=5.0))
    sig = next(p for p in tel.latest().pressure if p.kind == "cpu_bound")
    assert "api-server-count" in sig.fix and sig.value > 1.0


def test_vram_full_with_other_processes_growing():
    tel, _ = make(window_s=30.0)
    tel.set_vllm_pids([1])
    tel.add_gpu_sample(gpu(0.0, 22.5e9, procs={1: 21e9, 2: 1.5e9}))
    tel.add_gpu_sample(gpu(1.0, 22.6e9, procs={1: 21e9, 2: 1.6e9}))
    assert "vram_full" not in kinds(tel)  # 94 % but others grew only 100 MB
    tel.add_gpu_sample(gpu(2.0, 23.0e9, procs={1: 21e9, 2: 2.0e9}))
    sig = next(p for p in tel.latest().pressure if p.kind == "vram_full")
    assert "gpu-memory-utilization" in sig.fix
    tel2, _ = make(window_s=30.0)
    tel2.set_vllm_pids([1])
    tel2.add_gpu_sample(gpu(0.0, 12e9, procs={1: 10e9, 2: 1e9}))
    tel2.add_gpu_sample(gpu(1.0, 15e9, procs={1: 10e9, 2: 4e9}))
    assert "vram_full" not in kinds(tel2)  # growing, but far from full


# --- export --------------------------------------------------------------------------------


def test_export_json_and_csv(tmp_path):
    tel, _ = make()
    tel.add_vllm_sample(sample(0.0, gen=0.0))
    tel.add_gpu_sample(gpu(0.25, 10e9))
    tel.add_scrape_error(0.5, "refused")
    tel.add_vllm_sample(sample(1.0, gen=100.0))
    tel.export_json(tmp_path / "s.json")
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["format"] == "kvpilot-telemetry"
    assert set(data["series"]) == set(SERIES)
    gen = data["series"]["generation_tokens_per_s"]
    assert gen["unit"] == "tokens/s" and gen["t_monotonic_s"] == [0.0, 0.5, 1.0]
    assert gen["y"][:2] == [None, None] and gen["y"][2] == pytest.approx(100.0)
    assert data["series"]["memory_used_bytes"]["y"] == [pytest.approx(10e9, rel=1e-6)]

    tel.export_csv(tmp_path / "s.csv")
    with (tmp_path / "s.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["source"] for r in rows] == ["vllm", "gpu", "vllm", "vllm"]
    assert rows[0]["running"] == "1" and rows[0]["memory_used_bytes"] == ""
    assert rows[1]["memory_used_bytes"] == "1e+10" and rows[1]["running"] == ""
    assert rows[2]["running"] == ""  # the gap
    assert float(rows[3]["generation_tokens_per_s"]) == pytest.approx(100.0)
    assert float(rows[3]["t_unix_s"]) - float(rows[3]["t_monotonic_s"]) == pytest.approx(
        tel.wall_offset_s
    )


def test_clear_starts_a_new_session():
    tel, _ = make()
    tel.add_vllm_sample(sample(0.0, gen=0.0))
    tel.add_vllm_sample(sample(1.0, gen=10.0))
    tel.clear()
    assert tel.series("running")[0].size == 0
    assert tel.latest().generation_tokens_session == 0.0
    assert tel.latest().t_monotonic_s is None


def test_series_tables_are_consistent():
    assert set(VLLM_SERIES).isdisjoint(GPU_SERIES)
    assert {"ttft_p99_s", "itl_p50_s", "e2e_p90_s", "tpot_p99_s"} <= set(VLLM_SERIES)
    # a summary with a replaced field still compares by value
    tel, _ = make()
    tel.add_vllm_sample(sample(0.0))
    s = tel.latest()
    assert replace(s, model_name="x").model_name == "x"


# --- the hardware sampler's real GpuSample --------------------------------------------------


def test_real_gpu_samples_from_the_nvml_replay():
    from kvpilot.core.hardware.recorded_nvml import load_recorded
    from kvpilot.core.hardware.sampler import GpuSample, GpuSampler

    sampler = GpuSampler(nvml_module=load_recorded("rtx4090-desktop"))
    try:
        sample = sampler.sample_once()
    finally:
        sampler.close()
    tel, _ = make()
    pids = sorted(sample.process_used_bytes)
    tel.set_vllm_pids(pids[:2])
    tel.add_gpu_sample(sample)
    last = tel.latest()
    assert last["memory_used_bytes"] == sample.memory_used_bytes
    assert last["memory_total_bytes"] == sample.memory_total_bytes
    tree = sum(sample.process_used_bytes[p] for p in pids[:2])
    assert last["vllm_memory_bytes"] == tree
    assert last["other_memory_bytes"] == sample.memory_used_bytes - tree
    assert last["gpu_util_percent"] == sample.gpu_util_percent
    assert last["sm_clock_mhz"] == sample.sm_clock_mhz

    # WSL2: the driver reports no per-process bytes -> the tree's VRAM is unknown, not zero
    wsl = GpuSample(
        t_monotonic_s=1.0,
        gpu_index=0,
        memory_used_bytes=5 << 30,
        process_used_bytes={pids[0]: None},
    )
    tel.add_gpu_sample(wsl)
    assert tel.latest()["vllm_memory_bytes"] is None
    # a lost GPU is a gap
    tel.add_gpu_sample(GpuSample(t_monotonic_s=2.0, gpu_index=0, lost=True))
    _, used = tel.series("memory_used_bytes")
    assert used.size == 3 and math.isnan(used[2])
    assert tel.latest()["memory_used_bytes"] is None


def test_power_limit_and_throttle_series_from_a_throttling_card():
    from fakes import pynvml_stub

    from kvpilot.core.hardware.sampler import GpuSample, GpuSampler

    sampler = GpuSampler(nvml_module=pynvml_stub.load("throttling"))
    tel, _ = make()
    try:
        for _ in range(4):
            tel.add_gpu_sample(sampler.sample_once())
    finally:
        sampler.close()
    _, limit = tel.series("power_limit_w")
    _, mask = tel.series("throttle_reasons_mask")
    _, throttled = tel.series("throttled")
    assert limit.tolist() == [450.0] * 4
    assert mask.tolist() == [4.0, 4.0, 4.0, 32.0]  # power cap, then thermal
    assert throttled.tolist() == [1.0] * 4
    last = tel.latest()
    assert last["throttle_reasons_mask"] == 32.0 and last["throttled"] == 1.0
    # an idle bit alone is not a throttle; an unreported mask is a gap, not "not throttled"
    tel.add_gpu_sample(GpuSample(t_monotonic_s=9.0, gpu_index=0, throttle_reasons_mask=1))
    tel.add_gpu_sample(GpuSample(t_monotonic_s=10.0, gpu_index=0))
    _, throttled = tel.series("throttled")
    assert throttled[-2] == 0.0 and math.isnan(throttled[-1])


def test_bucket_layout_change_after_an_upgrade():
    tel, _ = make(window_s=100.0)
    tel.add_vllm_sample(sample(0.0))
    tel.add_vllm_sample(sample(1.0, ttft=(10, 10, 10, 10, 10)))  # all under 0.1 s
    other = (0.5, 5.0, math.inf)
    restarted = replace(sample(2.0), ttft=HistogramSnapshot(other, (0.0, 4.0, 4.0), 8.0, 4.0))
    tel.add_vllm_sample(restarted)
    # only the new server's four requests (0.5..5 s) count; the old layout is ignored
    assert 0.5 < tel.latest()["ttft_p50_s"] < 5.0
    nxt = replace(sample(3.0), ttft=HistogramSnapshot(other, (4.0, 8.0, 8.0), 9.0, 8.0))
    tel.add_vllm_sample(nxt)
    # window sums: (0, 4, 4) + (4, 4, 4) = (4, 8, 8); the median is the top of bucket one
    assert tel.latest()["ttft_p50_s"] == pytest.approx(0.5)
    assert tel.latest()["ttft_p99_s"] == pytest.approx(0.5 + 4.5 * (7.92 - 4) / 4)


def test_window_sums_return_to_zero_when_activity_leaves_the_window():
    tel, _ = make(window_s=5.0)
    tel.add_vllm_sample(sample(0.0))
    tel.add_vllm_sample(
        sample(1.0, pq=10.0, ph=5.0, success={"stop": 2.0}, preempt=1.0, ttft=(2, 2, 2, 2, 2))
    )
    assert tel.latest()["prefix_hit_rate"] == 0.5
    for i in range(2, 20):
        tel.add_vllm_sample(
            sample(
                float(i), pq=10.0, ph=5.0, success={"stop": 2.0}, preempt=1.0, ttft=(2, 2, 2, 2, 2)
            )
        )
    last = tel.latest()
    assert last["prefix_hit_rate"] is None and last["success_rate"] is None
    assert last["preemptions_per_min"] == 0.0 and last["ttft_p99_s"] is None
    assert last.finish_reason_fractions == {} and last.pressure == ()


def test_free_memory_under_the_desktop_room_of_a_capped_034_launch_is_a_signal():
    from kvpilot.core.fit.extensible_kv import launch_cap

    GiB = 1 << 30
    total = 25_394_413_568  # the rtx4090-desktop snapshot's CUDA total
    cap = launch_cap(vllm_version="0.34.0", total_bytes=total, free_now_bytes=23_783_800_832,
                     drives_display=True, holders=(("firefox", 840_957_952),))
    tel = Telemetry()
    tel.set_launch_cap(cap)
    # serving: vLLM holds its cap, the desktop its 1.5 GiB; free is the room plus the reserve
    used = total - cap.headroom_bytes - GiB // 2
    tel.add_gpu_sample(SimpleNamespace(t_monotonic_s=1.0, memory_used_bytes=float(used),
                                       memory_total_bytes=float(total)))
    assert "desktop_headroom" not in {s.kind for s in tel.latest().pressure}
    # the browser grows by 1.2 GiB: less free than the room the cap left
    tel.add_gpu_sample(SimpleNamespace(t_monotonic_s=2.0, memory_used_bytes=used + 1.2 * GiB,
                                       memory_total_bytes=float(total)))
    signal = next(s for s in tel.latest().pressure if s.kind == "desktop_headroom")
    assert "GiB kvpilot left for other programs" in signal.message
    assert signal.value == pytest.approx(cap.headroom_bytes + GiB // 2 - 1.2 * GiB, abs=1)
    tel.set_launch_cap(None)  # no cap (a dedicated GPU): no such signal
    assert "desktop_headroom" not in {s.kind for s in tel.latest().pressure}
