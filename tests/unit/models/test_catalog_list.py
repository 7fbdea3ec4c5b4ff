"""The catalog as listed (``kvpilot catalog``): what the recommender ranks, checkpoint by
checkpoint."""

from __future__ import annotations

import json

from kvpilot.core.cli import main
from kvpilot.core.models.catalog import all_checkpoint_specs, catalog_entries, unplannable
from kvpilot.core.models.catalog_list import catalog_listing, listing_to_json


def test_the_listing_holds_every_checkpoint_the_recommender_ranks():
    listed = catalog_listing()
    repos = [c.repo for m in listed for c in m.checkpoints]
    # what the recommender ranks, plus what it names rejected because it cannot plan it yet
    ranked = [s.model_id for s in all_checkpoint_specs()]
    waiting = [repo for repo, _why in unplannable()]
    assert sorted(repos) == sorted(ranked + waiting)
    assert len(listed) == len(catalog_entries())
    for model, entry in zip(listed, catalog_entries(), strict=True):
        assert model.entry is entry
        assert [c.weights_bytes for c in model.checkpoints] == [
            c.weights_bytes or None for c in entry.checkpoints]


def test_a_gpu_marks_what_its_compute_capability_changes(capsys):
    assert main(["catalog", "--family", "Qwen3", "--gpu", "RTX 3090"]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-8B-FP8" in out and "weight-only FP8" in out
    assert main(["catalog", "--family", "qwen3", "--gpu", "RTX 4090"]) == 0
    assert "weight-only" not in capsys.readouterr().out


def test_json_keys_and_unknown_family(capsys):
    assert main(["catalog", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data["models"][0]
    assert set(first) >= {"id", "family", "release_date", "checkpoints"}
    assert set(first["checkpoints"][0]) >= {"repo", "quantization", "weights_bytes",
                                            "weights_source"}
    assert data["models"] == listing_to_json(catalog_listing())
    assert main(["catalog", "--family", "NoSuchFamily"]) == 1
    assert "no model of that family" in capsys.readouterr().out


def test_this_release_entries_are_listed_and_an_nvfp4_one_runs_through_marlin_before_blackwell(
        capsys):
    assert main(["catalog", "--family", "Gemma 4", "--gpu", "RTX 4090"]) == 0
    out = capsys.readouterr().out
    assert "nvidia/Gemma-4-31B-IT-NVFP4" in out and "refused" not in out
    assert "Marlin FP4 kernel" in out  # weight-only FP4 on sm_89, said so
    assert "estimate" in out  # no public size was found: the byte model's figure, said so
    assert main(["catalog", "--family", "Gemma 4", "--gpu", "RTX 5090"]) == 0
    out = capsys.readouterr().out
    assert "refused" not in out and "Marlin" not in out


def test_entries_the_planner_cannot_plan_yet_are_rejected_with_the_reason_not_a_crash(
    monkeypatch,
):
    from kvpilot.core.fit.recommend import Goal, recommend
    from kvpilot.core.hardware.target import from_spec

    # every architecture of this release's entries has its memory rule, but Gemma 4 12B's
    # encoder-free Gemma4Unified one: listed, and named rejected with the reason
    assert [(repo, "Gemma4UnifiedForConditionalGeneration" in why)
            for repo, why in unplannable()] == [("google/gemma-4-12B-it-qat-w4a16-ct", True)]
    from kvpilot.core.models import catalog

    why = "kvpilot has no memory rule for FancyNewForCausalLM yet, so acme/fancy is not ranked"
    monkeypatch.setattr(catalog, "unplannable", lambda: (("acme/fancy", why),))
    result = recommend(from_spec("RTX 4090", "linux").card(), Goal())
    rejected = {r.model_id: r.reason for r in result.rejected}
    assert rejected["acme/fancy"] == why
    assert result.candidates


def test_every_model_is_dated_or_says_no_source_gave_a_date() -> None:
    import re

    from kvpilot.core.models.catalog_list import catalog_listing, listing_to_json

    rows = listing_to_json(catalog_listing())
    dated = [m for m in rows if m["release_date"]]
    for m in rows:
        if m["release_date"]:
            assert re.fullmatch(r"20\d\d-\d\d(-\d\d)?", m["release_date"]), m["id"]
            assert "http" in m["release_date_source"], m["id"]
        else:
            assert m["release_date_source"].startswith("date unknown"), m["id"]
    assert len(dated) >= len(rows) // 2
    # this year's models whose weights fit a 24 GiB card, each checkpoint with its size source
    fits = [(m["id"], c) for m in rows if (m["release_date"] or "").startswith("2026")
            for c in m["checkpoints"] if c["weights_bytes"] and c["weights_bytes"] <= 24 * 2**30]
    assert len(fits) >= 6
    assert all(c["weights_source"] in ("catalog", "estimate") for _, c in fits)
