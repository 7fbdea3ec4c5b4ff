"""/metrics of a real vLLM CPU server through MetricsScraper, MetricsSampler and Telemetry."""

from __future__ import annotations

import threading
import time

import httpx
from metricskit import parse_with_prometheus_client

from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig
from kvpilot.core.vllm.client import LoadTestConfig, run_load_test
from kvpilot.core.vllm.metrics import MetricsSampler, MetricsScraper


def test_scrape_real_server(vllm_server):
    scraper = MetricsScraper(vllm_server.base_url, timeout_s=10.0)
    try:
        fast = scraper.scrape()
    finally:
        scraper.close()
    full = parse_with_prometheus_client(
        httpx.get(vllm_server.base_url + "/metrics", timeout=10.0).text, 0.0
    )
    for sample in (fast, full):
        assert sample.has_vllm_metrics and not sample.legacy_names
        assert sample.model_name == vllm_server.model_name
        assert sample.running is not None and sample.waiting is not None
        assert sample.kv_usage_frac is not None and 0.0 <= sample.kv_usage_frac <= 1.0
        assert sample.ttft is not None and sample.itl is not None
        assert sample.e2e is not None and sample.tpot is not None
        blocks = sample.cache_config_number("num_gpu_blocks")
        block_size = sample.cache_config_number("block_size")
        tokens = sample.cache_config_number("kv_cache_size_tokens")
        assert blocks and block_size and tokens
        assert blocks * block_size == tokens
        assert sample.cache_config_number("kv_cache_max_concurrency") == tokens / 1024


def test_kv_usage_and_running_rise_while_requests_run(vllm_server):
    """Scrape fast (20 Hz) while four streams run: KV usage and running go above zero."""
    telemetry = Telemetry(TelemetryConfig(capacity=10_000))
    # the CPU engine answers /metrics late while four streams share two cores with it (a
    # scrape once took over 5 s in CI); the GUI's sampler waits 5 s on a GPU server
    scraper = MetricsScraper(vllm_server.base_url, timeout_s=20.0)
    errors: list[str] = []

    def on_error(t_monotonic_s: float, error: object) -> None:
        errors.append(str(error))
        telemetry.add_scrape_error(t_monotonic_s, str(error))

    sampler = MetricsSampler(scraper, telemetry.add_vllm_sample, on_error, interval_s=0.05)
    sampler.start()
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        report = run_load_test(
            LoadTestConfig(
                base_url=vllm_server.base_url,
                # long decodes: the tiny model makes about 3,000 tokens/s, and 8 x 192 tokens
                # could finish between two scrapes of the busy server (seen once in CI)
                concurrency_levels=(4,),
                prompt_tokens=256,
                output_tokens=640,
                requests_per_level=8,
                warmup_requests=0,
                request_timeout_s=120.0,
            )
        )
        time.sleep(1.0)
    finally:
        sampler.stop()
        scraper.close()
    assert report.levels[0].requests_ok == 8
    t_kv, kv = telemetry.series("kv_usage_frac")
    _, running = telemetry.series("running")
    assert t_kv[0] < t0
    assert sampler.samples_ok > 10 and sampler.samples_failed == 0, errors
    assert float(max(kv)) > 0.0
    assert float(max(running)) >= 1.0
    last = telemetry.latest()
    assert last.has_vllm_metrics is True and last.status_message is None
    assert last["ttft_p50_s"] is not None and last["ttft_p50_s"] > 0
    assert last["success_rate"] == 1.0


def test_sampler_thread_stops_cleanly(vllm_server):
    got = []
    scraper = MetricsScraper(vllm_server.base_url, timeout_s=5.0)
    sampler = MetricsSampler(scraper, got.append, lambda _t, e: got.append(e), interval_s=0.5)
    sampler.start()
    time.sleep(1.2)
    sampler.stop()
    scraper.close()
    assert not sampler.running
    assert 2 <= len(got) <= 4 and all(getattr(s, "has_vllm_metrics", False) for s in got)
    assert not [t for t in threading.enumerate() if t.name == "kvpilot-metrics" and t.is_alive()]
