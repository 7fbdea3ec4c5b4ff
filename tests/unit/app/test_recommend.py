"""Recommend, the use case both faces call: one model lookup, one order (fits, borderline, the
rest), the recommender's reasons, the user's fixed settings kept in every plan."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.app.launch_settings import with_settings
from kvpilot.core.app.recommend import RecommendRequest, models_for, rank
from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.plan import VERDICT_BORDERLINE, ServingSettings
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit.recommend import TIGHT_HEADROOM_BYTES, Goal, is_tight, kv_headroom_bytes
from kvpilot.core.hardware.target import from_spec

#: a desktop RTX 4090 with 22,900 MiB free (planner mode's card with a free-memory reading)
RTX4090 = replace(from_spec("RTX 4090", "linux"), free_bytes=22_900 * MiB)
QWEN_DIR = DATA / "models" / "qwen2.5-7b-instruct"


def _rank(models, goal: Goal, **kw):
    return rank(RecommendRequest(device=kw.pop("device", RTX4090), goal=goal,
                                 catalog=tuple(models), **kw))


def test_with_settings_keeps_only_serving_settings() -> None:
    assert with_settings(ServingSettings(), {}) == ServingSettings()
    backend = with_settings(ServingSettings(), {"kv_cache_memory_bytes": 64 * MiB})
    assert ServingSettings().settings_changes(backend) == {"kv_cache_memory_bytes": 64 * MiB}
    with pytest.raises(TypeError, match="no_such_setting"):
        with_settings(ServingSettings(), {"no_such_setting": 1})


def test_fixed_settings_are_kept_in_every_plan(qwen7b, llama8b) -> None:
    fixed = ServingSettings(kv_cache_dtype="fp8", gpu_memory_utilization=0.85)
    result = _rank([qwen7b, llama8b], Goal(context_tokens=16384, users=4), fixed=fixed)
    rec = result.recommendation
    assert result.plans and len(result.plans) == len(rec.candidates) + len(rec.rejected)
    assert any(p.capacity is not None for p in result.plans)
    for p in result.plans:
        if p.capacity is not None:
            assert p.capacity.kv_cache_dtype == "fp8"
            assert p.capacity.gpu_memory_utilization == 0.85
    # a fixed utilization is the user's: no sentence about choosing one
    assert not result.choice.automatic and result.choice.sentence == ""


def test_every_reason_is_the_recommenders(qwen7b, llama8b) -> None:
    for fixed in (ServingSettings(), ServingSettings(kv_cache_dtype="fp8")):
        result = _rank([qwen7b, llama8b], Goal(context_tokens=8192, users=2), fixed=fixed)
        for p in result.plans:
            record = p.candidate or p.rejection
            assert record is not None and p.reason == record.reason
    assert result.plans[0].fits and result.plans[0].launchable and not result.plans[0].borderline


def test_order_is_fits_then_borderline_then_the_rest(qwen7b, llama8b, gptoss) -> None:
    # a context that only some checkpoints serve on a busy card
    busy = replace(RTX4090, free_bytes=19_000 * MiB)
    result = _rank([qwen7b, llama8b, gptoss], Goal(context_tokens=32768, users=6), device=busy)
    plans = result.plans
    ranks = [0 if p.fits else 1 if p.borderline else 2 for p in plans]
    assert ranks == sorted(ranks)
    assert any(not p.fits for p in plans)
    for p in plans:
        if p.rejection is not None:
            assert not p.fits and not p.tight and p.reason == p.rejection.reason
            assert p.borderline == (p.rejection.borderline is not None)
            if p.borderline:
                assert p.capacity is not None and p.capacity.verdict == VERDICT_BORDERLINE
    # the record's lists follow the one order too
    assert result.candidates == tuple(p.candidate for p in plans if p.candidate)
    assert result.rejected == tuple(p.rejection for p in plans if p.rejection)


def test_tight_is_the_recommenders_rule(qwen7b, llama8b, gptoss) -> None:
    result = _rank([qwen7b, llama8b, gptoss], Goal(context_tokens=32768, users=4))
    for p in result.plans:
        cand = p.candidate
        if cand is None:
            continue
        assert p.tight == cand.tight == is_tight(p.capacity, 4)
        assert cand.kv_headroom_bytes == kv_headroom_bytes(p.capacity, 4)
        assert p.tight == (cand.kv_headroom_bytes < TIGHT_HEADROOM_BYTES)
        # the planner's "KV spare" column shows the figure the rule judges
        assert p.kv_headroom_bytes == cand.kv_headroom_bytes


def test_the_tight_threshold_sits_at_one_gib_of_kv_headroom(qwen7b) -> None:
    result = _rank([qwen7b], Goal(context_tokens=8192, users=2))
    cap = result.candidates[0].capacity
    headroom = kv_headroom_bytes(cap, 2)
    assert headroom > GiB and not is_tight(cap, 2)
    # the same plan with less KV at the band's lower edge: just under and just over 1 GiB
    low = cap.available_kv_low_bytes
    under = replace(cap, available_kv_band_bytes=(low - headroom + GiB - 1, low))
    at = replace(cap, available_kv_band_bytes=(low - headroom + GiB, low))
    assert is_tight(under, 2) and not is_tight(at, 2)


def test_limit_keeps_that_many_fitting_plans_and_every_rejection(qwen7b, llama8b, gptoss) -> None:
    goal = Goal(context_tokens=32768, users=6)
    busy = replace(RTX4090, free_bytes=19_000 * MiB)
    full = _rank([qwen7b, llama8b, gptoss], goal, device=busy)
    cut = _rank([qwen7b, llama8b, gptoss], goal, device=busy, limit=1)
    assert cut.candidates == full.candidates[:1]
    assert cut.rejected == full.rejected


def test_a_local_folder_ranks_that_model_and_is_what_vllm_gets() -> None:
    result = rank(RecommendRequest(device=RTX4090, goal=Goal(context_tokens=8192, users=2),
                                   model_ref=str(QWEN_DIR)))
    assert [p.model_ref for p in result.plans] == [str(QWEN_DIR)]
    assert result.plans[0].fits


def test_a_hub_id_in_the_cache_ranks_that_model(tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "hub" / "models--someone--qwen-copy"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_bytes((QWEN_DIR / "config.json").read_bytes())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    result = rank(RecommendRequest(device=RTX4090, goal=Goal(context_tokens=8192, users=2),
                                   model_ref="someone/qwen-copy"))
    assert [p.model_ref for p in result.plans] == ["someone/qwen-copy"]
    assert result.plans[0].inputs is not None


def test_a_catalog_filter_launches_each_checkpoint_by_its_id(qwen7b, llama8b) -> None:
    result = _rank([qwen7b, llama8b], Goal(context_tokens=8192, users=2), model_ref="qwen")
    assert [p.model_id for p in result.plans] == [qwen7b.model_id]
    assert [p.model_ref for p in result.plans] == [qwen7b.model_id]


def test_a_folder_without_config_json_says_so(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"")
    with pytest.raises(ModelSpecError, match=r"no config\.json"):
        models_for(str(tmp_path))


def test_catalog_text_filters_and_an_unknown_id_is_looked_up(qwen7b, llama8b) -> None:
    assert models_for("") == (None, None)
    assert models_for("qwen", [qwen7b, llama8b]) == (None, "qwen")
    with pytest.raises(ModelSpecError, match="not a repo id"):
        models_for("no-such-model-anywhere", [qwen7b])


def test_an_unreadable_measurement_file_is_said_and_the_plans_are_predictions(
    qwen7b, tmp_path: Path
) -> None:
    bad = tmp_path / "measurements.json"
    bad.write_text(json.dumps({"no": "entries"}))
    result = _rank([qwen7b], Goal(context_tokens=8192, users=2), measurements=bad)
    assert "measurements" in result.measurements_problem and str(bad) in result.measurements_problem
    assert result.plans[0].fits


def test_a_ranked_plan_notes_its_quality_figure_and_why_it_ranks_above_the_next(
    qwen7b, llama8b
) -> None:
    from kvpilot.core.app.recommend import quality_notes
    from kvpilot.core.fit.recommend import why_above

    result = _rank([qwen7b, llama8b], Goal(context_tokens=8192, users=2))
    first, second = result.candidates[:2]
    notes = quality_notes(first, second)
    assert [label for label, _ in notes] == ["quality", "ranked above the next"]
    q = first.quality
    assert notes[0][1].startswith(f"{q.score:.1f} on {q.benchmark}" if q.rated else "unrated: ")
    assert q.source in notes[0][1]
    assert notes[1][1] == why_above(first, second)
    assert [label for label, _ in quality_notes(second)] == ["quality"]  # the last: its figure
    assert quality_notes(None, first) == []  # not ranked by the recommender


def test_warm_reads_the_catalog_once_even_beside_a_rank_and_changes_no_plan() -> None:
    import threading

    from kvpilot.core.app.recommend import warm
    from kvpilot.core.models import catalog

    goal = Goal(context_tokens=8192, users=4)
    catalog.forget_loaded_catalog()
    cold = rank(RecommendRequest(device=RTX4090, goal=goal))
    catalog.forget_loaded_catalog()
    ahead = threading.Thread(target=warm)
    ahead.start()
    beside = rank(RecommendRequest(device=RTX4090, goal=goal))  # while it reads, or after
    ahead.join()
    # one reading of the catalog for both: the rank waited for it instead of reading beside it
    assert catalog.all_checkpoint_specs.cache_info().misses == 1
    assert catalog.catalog_entries.cache_info().misses == 1
    assert [(p.model_id, p.capacity, p.reason) for p in beside.plans] == [
        (p.model_id, p.capacity, p.reason) for p in cold.plans]
    assert len(beside.plans) > 20
