"""A load test kept with the run it measured: matched by URL to the running record, never to a
finished one or a server kvpilot did not start (the real engine: tests/e2e/test_serve_profile_
e2e.py runs ``kvpilot bench`` against ``kvpilot serve --profile``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvpilot.core.app.loadtest import (
    level_gpu_words,
    load_test_config,
    record_load_test,
    report_gpu_words,
)
from kvpilot.core.hardware.energy import GpuEnergy
from kvpilot.core.runs.record import RUNNING, STOPPED, RunRecord
from kvpilot.core.runs.store import RunStore
from kvpilot.core.vllm.client import LevelResult, LoadTestError, LoadTestReport


def _report(base_url: str) -> LoadTestReport:
    gpu = GpuEnergy(energy_j=500.0, duration_s=2.0, mean_power_w=250.0, j_per_token=1.25,
                    source="counter", throttled=True, throttle_reasons=("power cap",),
                    throttle_reasons_mask=4, samples=20)
    level = LevelResult(
        concurrency=2, requests_sent=4, requests_ok=4, errors=0, error_examples=(),
        duration_s=2.0, ttft_p50_s=0.1, ttft_p90_s=0.15, ttft_p99_s=0.2, tpot_p50_s=0.02,
        tpot_p90_s=0.025, tpot_p99_s=0.03, e2e_p50_s=1.0, e2e_p90_s=1.1, e2e_p99_s=1.2,
        prompt_tokens_total=64, prompt_tokens_mean=16.0, output_tokens_total=400,
        output_tokens_per_s=200.0, requests_per_s=2.0, goodput_requests=4, goodput_per_s=2.0,
        meets_slo_p99=True, gpu=gpu,
    )
    return LoadTestReport(
        base_url=base_url, model="tiny", api="completions", prompt_tokens_target=16,
        output_tokens_target=100, ttft_slo_s=1.0, tpot_slo_s=0.05, prompt_calibration="tokenize",
        prompt_words=12, levels=(level,), slo_break_concurrency=None, slo_break_reason=None,
        warmup_output_tokens=8, cancelled=False,
    )


def test_the_test_goes_to_the_running_record_at_its_url(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    old = RunRecord(id="20260101-100000-aaaa", started_at="t", model="m", state=STOPPED,
                    base_url="http://127.0.0.1:8000", owner_pid=os.getpid())
    live = RunRecord(id="20260101-110000-bbbb", started_at="t", model="m", state=RUNNING,
                     base_url="http://127.0.0.1:8000", owner_pid=os.getpid())
    other = RunRecord(id="20260101-120000-cccc", started_at="t", model="m", state=RUNNING,
                      base_url="http://127.0.0.1:8001", owner_pid=os.getpid())
    for rec in (old, live, other):
        store.write(rec)
    updated = record_load_test(tmp_path, _report("http://localhost:8000/v1"), "gui")
    assert updated is not None and updated.id == live.id
    (test,) = store.read(live.id).load_tests
    assert test.source == "gui" and test.output_tokens == 100
    (lv,) = test.levels
    assert (lv.concurrency, lv.output_tokens_per_s, lv.j_per_token) == (2, 200.0, 1.25)
    assert lv.throttled is True and lv.throttle_reasons == ("power cap",)
    assert store.read(old.id).load_tests == () and store.read(other.id).load_tests == ()
    # a server kvpilot does not run here: the result is only returned, nothing is written
    assert record_load_test(tmp_path, _report("http://127.0.0.1:9999"), "cli") is None


def test_the_settings_are_checked_before_anything_runs() -> None:
    config = load_test_config("http://127.0.0.1:8000", concurrency_levels=(1, 4),
                              prompt_tokens=64, requests_per_level=8)
    assert (config.base_url, config.concurrency_levels, config.prompt_tokens) == (
        "http://127.0.0.1:8000", (1, 4), 64)
    with pytest.raises(LoadTestError, match="concurrency levels must be integers >= 1"):
        load_test_config("http://127.0.0.1:8000", concurrency_levels=(0,))
    with pytest.raises(LoadTestError, match="prompt and output tokens must be >= 1"):
        load_test_config("http://127.0.0.1:8000", output_tokens=0)


def test_the_gpu_figures_in_words_level_by_level() -> None:
    report = _report("http://127.0.0.1:8000")
    words = report_gpu_words(report)
    (level,) = words.levels
    assert level.cells == ("1.25", "250", "power cap")
    assert level.throttled
    assert level.line == "500.0 J, 1.25 J/token, mean 250 W (counter); THROTTLED: power cap"
    assert words.throttle_note is not None
    assert words.throttle_note.startswith("the GPU was throttled at concurrency 2 (power cap)")
    none = level_gpu_words(None)
    assert (none.cells, none.line, none.throttled) == (("-", "-", "-"), "", False)
