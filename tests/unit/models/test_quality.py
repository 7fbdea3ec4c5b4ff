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


def test_an_upload_of_no_known_scheme_without_published_recovery_keeps_the_base_figure() -> None:
    found = find("gaunernst/gemma-3-27b-it-int4-awq")
    assert found is not None
    fig = figure_for("gaunernst/gemma-3-27b-it-int4-awq", "chat", found[0].id)
    assert fig.score == 10 and fig.recovery is None
    assert "used unchanged" in fig.recovery_note


def test_figures_of_another_benchmark_are_never_mixed_in() -> None:
    # Qwen3.5-35B-A3B has a SWE-bench Verified figure and no Intelligence Index v4.0 one
    assert figure_for("Qwen/Qwen3.5-35B-A3B", "coding").score == pytest.approx(70.0)
    chat = figure_for("Qwen/Qwen3.5-35B-A3B", "chat")
    assert not chat.rated and chat.benchmark == UNRATED
    assert "Intelligence Index v4.0" in chat.source
    # gpt-oss-20b has one of each: every use case reads its own
    assert figure_for("openai/gpt-oss-20b", "coding").score == pytest.approx(60.7)
    assert figure_for("openai/gpt-oss-20b", "chat").score == pytest.approx(24.5)


def test_the_json_form_keeps_the_contract_keys() -> None:
    out = figure_for("nvidia/Qwen3.6-27B-NVFP4", "chat").to_json()
    assert {"score", "benchmark", "source", "date"} <= set(out)
    assert out["score"] == 46


def test_an_upload_without_published_recovery_takes_its_schemes_study_figure() -> None:
    from kvpilot.core.base.model_spec import Quantization
    from kvpilot.core.models.quality import RECOVERY_SCHEME, quality_table

    schemes = quality_table()["schemes"]
    awq = Quantization("awq", bits=4, group_size=128)
    fig = figure_for("gaunernst/gemma-3-27b-it-int4-awq", "chat", "google/gemma-3-27b-it", awq)
    assert fig.raw_score == 10 and fig.recovery == schemes["int4"]["recovery"] < 1.0
    assert fig.score == pytest.approx(10 * schemes["int4"]["recovery"])
    assert fig.recovery_kind == RECOVERY_SCHEME and "study per scheme" in fig.recovery_note
    assert fig.to_json()["recovery_kind"] == RECOVERY_SCHEME
    fp8 = figure_for("tcotter/Qwen3.5-9B-FP8-Dynamic", "chat", "Qwen/Qwen3.5-9B",
                     Quantization("compressed-tensors", bits=8))
    assert fp8.recovery == schemes["fp8"]["recovery"]
    nvfp4 = figure_for("nvidia/Qwen3.6-27B-NVFP4", "chat", None,
                       Quantization("modelopt", bits=4, group_size=16))
    assert nvfp4.recovery == schemes["nvfp4"]["recovery"]
    assert "NVIDIA reports" in nvfp4.recovery_note  # what was read of the upload stays said


def test_publishing_no_recovery_no_longer_outranks_a_published_one() -> None:
    from kvpilot.core.base.model_spec import Quantization
    from kvpilot.core.models.quality import RECOVERY_QUANTIZER

    # both NVFP4 uploads of 2026 Qwen models; the one whose quantizer published 1.0 recovery
    published = figure_for("davidyu-nv/Qwen3.5-9B-NVFP4-MSE", "chat", None,
                           Quantization("modelopt", bits=4, group_size=16))
    silent = figure_for("someone/Qwen3.5-9B-FP8", "chat", "Qwen/Qwen3.5-9B",
                        Quantization("fp8", bits=8))
    assert published.recovery_kind == RECOVERY_QUANTIZER and published.recovery == 1.0
    assert silent.raw_score == published.raw_score and silent.score is not None
    assert silent.score < published.score
    # the quantizer's own figure wins over the study's, even below it
    palm = figure_for("palmfuture/Qwen3.6-35B-A3B-GPTQ-Int4", "chat", None,
                      Quantization("gptq", bits=4, group_size=128))
    assert palm.recovery == pytest.approx(0.979) and palm.recovery_kind == RECOVERY_QUANTIZER


def test_a_scheme_the_study_does_not_cover_keeps_the_base_figure_and_says_so() -> None:
    from kvpilot.core.base.model_spec import Quantization

    int8 = figure_for("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int8", "chat", "Qwen/Qwen3.5-9B",
                      Quantization("gptq", bits=8, group_size=128))
    assert int8.score == int8.raw_score == 32 and int8.recovery is None
    assert "does not cover" in int8.recovery_note and int8.recovery_kind == ""
    base = figure_for("Qwen/Qwen3.5-9B", "chat", None, None)
    assert base.recovery is None and base.recovery_note == ""


def test_every_scheme_figure_names_the_study_and_its_date() -> None:
    from kvpilot.core.models.quality import quality_table

    schemes = {k: v for k, v in quality_table()["schemes"].items() if k != "about"}
    assert set(schemes) == {"fp8", "int4", "nvfp4"}
    for row in schemes.values():
        assert 0.9 < row["recovery"] <= 1.0 and row["date"] == "2026-06-09"
        assert row["source"].startswith("https://github.com/sch0tten/nvfp4-benchmark")


def test_an_upload_listed_as_its_own_catalog_entry_belongs_to_the_base_the_table_names() -> None:
    from kvpilot.core.models.quality import base_of

    # nvidia/Qwen3.6-27B-NVFP4 is its own catalog entry; the table names its base model
    assert base_of("nvidia/Qwen3.6-27B-NVFP4", "nvidia/Qwen3.6-27B-NVFP4") == "Qwen/Qwen3.6-27B"
    assert base_of("RedHatAI/Qwen3.5-9B-FP8-dynamic", "Qwen/Qwen3.5-9B") == "Qwen/Qwen3.5-9B"
    assert base_of("someone/unlisted") == "someone/unlisted"


@pytest.mark.parametrize(("model", "score"), [("Qwen/Qwen3.5-4B", 27), ("Qwen/Qwen3.5-2B", 16),
                                               ("Qwen/Qwen3.5-0.8B", 9)])
def test_the_small_qwen35_models_are_rated_for_a_catalog_refreshed_from_the_hub(
    model: str, score: float
) -> None:
    # not in the shipped catalog (no config.json copy or byte size was sourced); a refreshed
    # catalog that lists them, or an upload of them, finds their published figure
    assert find(model) is None
    fig = figure_for(model, "chat")
    assert fig.score == score and fig.date == "2026-03-05"
    assert fig.source.startswith("https://artificialanalysis.ai/articles/qwen3-5-small-models")
    assert figure_for(f"someone/{model.split('/')[1]}-AWQ", "chat", model).rated
