"""Ranking by published quality on the recorded cards (``kvpilot recommend --json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvpilot.core.fit.recommend import RATED_BASE, quality_points, why_above
from kvpilot.core.models.catalog import find
from kvpilot.core.models.quality import figure_for, unrated

GOALS = {
    "chat": ["--use-case", "chat", "--context", "8k", "--users", "4"],
    "long-docs": ["--use-case", "long-docs", "--context", "32k", "--users", "1"],
    "batch": ["--use-case", "batch"],
    "coding": ["--use-case", "coding", "--context", "32k", "--users", "1"],
}


def _recommend(snapshot: str, goal: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
               capsys: Any) -> dict[str, Any]:
    from kvpilot.core import cli

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVPILOT_FAKE_NVML", snapshot)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["recommend", *GOALS[goal], "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def _released_2026(repo: str) -> bool:
    found = find(repo)
    return found is not None and found[0].release_date.startswith("2026")


@pytest.mark.parametrize("goal", ["chat", "long-docs", "batch"])
def test_on_the_5090_the_top_plan_is_a_2026_model_with_a_sourced_figure(
    goal: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    out = _recommend("rtx5090", goal, monkeypatch, tmp_path, capsys)
    top = out["candidates"][0]
    assert _released_2026(top["model"]), top["model"]
    assert top["quality"]["source"].startswith("http")
    assert top["quality"]["benchmark"] == "Artificial Analysis Intelligence Index v4.0"
    # rated plans come first, in one benchmark; the unrated ones after them
    rated = [c["quality"]["score"] is not None for c in out["candidates"]]
    assert rated == sorted(rated, reverse=True)


def test_coding_ranks_by_swe_bench_verified(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    out = _recommend("rtx4090-desktop", "coding", monkeypatch, tmp_path, capsys)
    top = out["candidates"][0]
    assert top["quality"]["benchmark"] == "SWE-bench Verified"
    assert top["quality"]["score"] > 0 and top["quality"]["date"]
    for c in out["candidates"]:  # the contract's keys are kept, quality added
        assert {"rank", "model", "score", "reason", "budget", "quality"} <= set(c)


def test_a_rated_plan_always_outranks_an_unrated_one() -> None:
    weakest = figure_for("gaunernst/gemma-3-27b-it-int4-awq", "chat", "google/gemma-3-27b-it")
    rated = quality_points(weakest, 27_000_000_000, 27_000_000_000, 4)
    biggest_unrated = quality_points(unrated("none"), 10**12, 10**12, 16)
    assert rated >= RATED_BASE > biggest_unrated + 20  # speed terms stay below 20 points


def test_why_above_names_both_figures() -> None:
    from dataclasses import replace

    from kvpilot.core.fit import recommend as rec

    base = _any_candidate()
    a = replace(base, model_id="a", quality=figure_for("nvidia/Qwen3.6-27B-NVFP4", "chat"))
    b = replace(base, model_id="b", quality=figure_for("nvidia/Qwen3.6-35B-A3B-NVFP4", "chat"))
    line = why_above(a, b)
    assert "46.0" in line and "42.8" in line and "Intelligence Index v4.0" in line
    assert "unrated" in rec.why_above(b, replace(base, model_id="c", quality=unrated("x")))


def _any_candidate() -> Any:
    from kvpilot.core.base.goal import Goal
    from kvpilot.core.base.plan import GpuTarget
    from kvpilot.core.fit.recommend import recommend
    from kvpilot.core.models.catalog import get

    gpu = GpuTarget("NVIDIA GeForce RTX 4090", 24 * 2**30, 22 * 2**30, (8, 9), 1.008e12, 165.2)
    found = recommend(gpu, Goal("chat", 4096, 1), [get("Qwen/Qwen3-8B-AWQ")])
    return found.candidates[0]


def _plan(model: str, score: float, *, base: str, rated: bool = True,
          estimated: bool = False) -> Any:
    from dataclasses import replace

    quality = figure_for("Qwen/Qwen3.5-9B", "chat") if rated else unrated("none")
    return replace(_any_candidate(), model_id=model, score=score, base_model=base,
                   quality=quality, size_estimated=estimated)


def test_each_models_best_plan_ranks_before_the_other_uploads_of_a_model_shown() -> None:
    from kvpilot.core.fit.recommend import ranked_order

    plans = [_plan("m/a-fp8", 133.0, base="m/a"), _plan("m/a-nvfp4", 135.0, base="m/a"),
             _plan("n/b", 120.0, base="n/b"), _plan("m/a-awq", 134.0, base="m/a"),
             _plan("o/c", 90.0, base="o/c", rated=False)]
    order = ranked_order(plans)
    assert [p.model_id for p in order] == ["m/a-nvfp4", "n/b", "m/a-awq", "m/a-fp8", "o/c"]
    # the rated tier still comes first: an unrated model's best plan after every rated upload
    assert [p.repeat_of_model for p in order] == [False, False, True, True, False]
    assert "another upload of m/a" in why_above(order[1], order[2])


def test_a_rated_plan_sized_by_the_byte_model_ranks_after_every_one_of_published_size() -> None:
    from kvpilot.core.fit.recommend import ranked_order

    plans = [_plan("m/a-est", 140.0, base="m/a", estimated=True),
             _plan("n/b", 110.0, base="n/b"), _plan("m/a-pub", 130.0, base="m/a"),
             _plan("o/c", 60.0, base="o/c", rated=False),
             _plan("q/e", 70.0, base="q/e", rated=False, estimated=True),
             _plan("p/d", 120.0, base="p/d", estimated=True)]
    order = ranked_order(plans)
    # unrated plans keep their fallback order whatever their size's source
    assert [p.model_id for p in order] == ["m/a-pub", "n/b", "p/d", "m/a-est", "q/e", "o/c"]
    assert "only the byte model's estimate" in why_above(order[1], order[2])
    assert order[3].repeat_of_model and not order[2].repeat_of_model


@pytest.mark.parametrize("snapshot", ["rtx4090-desktop", "rtx5090"])
@pytest.mark.parametrize("goal", ["chat", "long-docs", "batch"])
def test_the_top_plans_are_distinct_models_before_any_second_upload(
    goal: str, snapshot: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    cands = _recommend(snapshot, goal, monkeypatch, tmp_path, capsys)["candidates"]
    bases = [c["base_model"] for c in cands]
    first_repeat = next(i for i, c in enumerate(cands) if c["repeat_of_model"])
    assert len(set(bases[:first_repeat])) == first_repeat >= 3, bases[:first_repeat]
    for c in cands[:first_repeat]:
        assert c["quality"]["score"] is not None and not c["size_estimated"], c["model"]
