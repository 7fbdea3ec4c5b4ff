"""The load test against a real vLLM CPU server, checked against the server's own counters."""

from __future__ import annotations

import json
import time

import pytest

from kvpilot.core.cli import main
from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig
from kvpilot.core.vllm.client import LoadTestConfig, run_load_test
from kvpilot.core.vllm.metrics import MetricsSampler, MetricsScraper


def test_load_test_levels_agree_with_scraped_counters(vllm_server):
    telemetry = Telemetry(TelemetryConfig(capacity=10_000, rate_window_s=5.0))
    scraper = MetricsScraper(vllm_server.base_url, timeout_s=5.0)
    sampler = MetricsSampler(
        scraper, telemetry.add_vllm_sample, telemetry.add_scrape_error, interval_s=0.5
    )
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while telemetry.latest().t_monotonic_s is None and time.monotonic() < deadline:
            time.sleep(0.1)
        start_tokens = telemetry.latest().generation_tokens_session
        before = scraper.scrape()
        t0 = time.monotonic()
        report = run_load_test(
            LoadTestConfig(
                base_url=vllm_server.base_url,
                concurrency_levels=(1, 2, 4),
                prompt_tokens=64,
                output_tokens=32,
                requests_per_level=4,
                duration_s=120.0,
                request_timeout_s=120.0,
            )
        )
        run_s = time.monotonic() - t0
        time.sleep(1.5)  # let the sampler see the final counters
        after = scraper.scrape()
        end_tokens = telemetry.latest().generation_tokens_session
    finally:
        sampler.stop()
        scraper.close()

    assert report.model == vllm_server.model_name  # auto-detected from /v1/models
    assert report.prompt_calibration == "tokenize"
    assert [lv.concurrency for lv in report.levels] == [1, 2, 4]
    for lv in report.levels:
        assert lv.requests_ok == 4 and lv.errors == 0, lv.error_examples
        assert lv.output_tokens_total == 4 * 32  # ignore_eos: exactly max_tokens each
        assert lv.prompt_tokens_mean is not None and 48 <= lv.prompt_tokens_mean <= 80
        assert 0 < lv.ttft_p50_s <= lv.ttft_p90_s <= lv.ttft_p99_s
        assert 0 < lv.tpot_p50_s <= lv.tpot_p99_s
        assert lv.e2e_p50_s > lv.ttft_p50_s
        assert lv.output_tokens_per_s > 0 and lv.requests_per_s > 0
        assert 0 <= lv.goodput_requests <= lv.requests_ok

    own = report.output_tokens_total
    counter = after.generation_tokens_total - before.generation_tokens_total
    assert counter == pytest.approx(own, rel=0.10)
    # the telemetry's reset-safe counter increments say the same
    assert end_tokens - start_tokens == pytest.approx(own, rel=0.10)
    # and so do the rates over the run
    assert counter / run_s == pytest.approx(own / run_s, rel=0.10)


def test_bench_cli_json(vllm_server, capsys):
    rc = main(
        [
            "bench",
            "--url",
            vllm_server.base_url,
            "--concurrency",
            "2",
            "--requests",
            "2",
            "--prompt-tokens",
            "32",
            "--output-tokens",
            "16",
            "--api",
            "chat",
            "--json",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    level = data["levels"][0]
    assert level["requests_ok"] == 2 and level["output_tokens_total"] == 32
    assert data["model"] == vllm_server.model_name
