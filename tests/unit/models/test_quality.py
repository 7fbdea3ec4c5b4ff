"""The published quality figures: one benchmark per use case, sourced and dated."""

from __future__ import annotations

import pytest

from kvpilot.core.models.catalog import find
from kvpilot.core.models.quality import UNRATED, benchmark_for, figure_for, quality_table


def test_every_figure_names_its_benchmark_source_and_date() -> None:
    table = quality_table()
    benchmarks = table["benchmarks"]
    for model, rows in table["figures"].items():
        for row in rows:
            assert row["benchmark"] in benchmarks, (model, row)
            assert row["source"].startswith("http"), (model, row)
            assert row["date"][:4] in ("2025", "2026"), (model, row)
            assert 0 < float(row["score"]) <= 100, (model, row)
    for repo, upload in table["uploads"].items():
        assert upload["source"], repo
        assert upload["recovery"] is None or 0.5 < upload["recovery"] <= 1.0, repo


@pytest.mark.parametrize("use_case", ["chat", "long-docs", "batch", "coding"])
def test_each_use_case_ranks_by_one_named_benchmark(use_case: str) -> None:
    key, name = benchmark_for(use_case)
    assert key and name and name != UNRATED


def test_a_quantized_upload_carries_its_quantizers_published_recovery() -> None:
    base = figure_for("Qwen/Qwen3.6-35B-A3B", "chat")
    upload = figure_for("nvidia/Qwen3.6-35B-A3B-NVFP4", "chat")
    assert base.rated and upload.rated
    assert upload.raw_score == base.score == 43
    assert upload.recovery is not None and upload.score == pytest.approx(43 * upload.recovery)
    assert "MMLU Pro" in upload.recovery_note


def test_an_upload_without_published_recovery_says_its_figure_is_the_base_one() -> None:
    found = find("gaunernst/gemma-3-27b-it-int4-awq")
    assert found is not None
    fig = figure_for("gaunernst/gemma-3-27b-it-int4-awq", "chat", found[0].id)
    assert fig.score == 10 and fig.recovery is None
    assert "used unchanged" in fig.recovery_note


def test_figures_of_another_benchmark_are_never_mixed_in() -> None:
    # gpt-oss-20b has a SWE-bench Verified figure and no Intelligence Index v4.0 one
    assert figure_for("openai/gpt-oss-20b", "coding").score == pytest.approx(60.7)
    chat = figure_for("openai/gpt-oss-20b", "chat")
    assert not chat.rated and chat.benchmark == UNRATED
    assert "Intelligence Index v4.0" in chat.source


def test_the_json_form_keeps_the_contract_keys() -> None:
    out = figure_for("nvidia/Qwen3.6-27B-NVFP4", "chat").to_json()
    assert {"score", "benchmark", "source", "date"} <= set(out)
    assert out["score"] == 46
