"""Runs side by side: the best value of each figure of merit, every concurrency tested."""

from __future__ import annotations

import pytest
from runskit import level, record

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.runs.compare import compare, format_comparison
from kvpilot.core.runs.record import (
    LoadTestSummary,
)


def test_compare_marks_the_best_and_covers_every_concurrency() -> None:
    a = record("20260101-100000-aaaa", load_tests=(LoadTestSummary(
        at="t", api="completions", prompt_tokens=256, output_tokens=128, ttft_slo_s=1,
        tpot_slo_s=0.05, levels=(level(1, 50.0, 0.1, 0.8), level(4, 150.0, 0.3, 1.4))),))
    b = record("20260101-110000-bbbb", settings={"max_model_len": 8192, "kv_cache_dtype": "fp8"},
                reported={"kv_cache_tokens": 196_608, "max_concurrency": 24.0},
                load_tests=(LoadTestSummary(
                    at="t", api="completions", prompt_tokens=256, output_tokens=128,
                    ttft_slo_s=1, tpot_slo_s=0.05,
                    levels=(level(1, 45.0, 0.12, 0.7), level(8, 220.0, 0.5, 0.9))),))
    table = compare([a, b])
    assert table.row("KV tokens reported").best_index() == 1
    assert table.row("output tokens/s @ 1").best_index() == 0
    assert table.row("TTFT P50 @ 1").best_index() == 0
    assert table.row("J/token @ 1").best_index() == 1
    assert table.row("output tokens/s @ 8").values == (None, 220.0)
    assert table.row("throttled @ 4").values == ("power cap", None)
    assert table.row("kv_cache_dtype").values == ("auto", "fp8")
    text = format_comparison(table)
    assert "196,608 *" in text and "[4 users]" in text
    assert table.row("max concurrency reported").best_index() is None  # a tie: no best
    with pytest.raises(KvpilotError):
        compare([a])
