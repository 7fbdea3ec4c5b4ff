"""Re-planning with the user's fixed settings: one ordered list with verdict, tight and reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvpilot.core.base.plan import VERDICT_BORDERLINE, GpuTarget, ServingSettings
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit.recommend import TIGHT_HEADROOM_BYTES, Goal, is_tight, kv_headroom_bytes
from kvpilot.core.fit.replan import (
    capacity_reason,
    fixed_settings,
    ranked_plans,
    replan,
    user_fixed,
    with_settings,
)

RTX4090 = GpuTarget("NVIDIA GeForce RTX 4090", 24564 * MiB, 22_900 * MiB, (8, 9), 1.008e12, 165.2)


def test_fixed_settings_keep_only_what_the_user_chose() -> None:
    assert fixed_settings() == ServingSettings()
    assert not user_fixed(fixed_settings())
    chosen = fixed_settings(kv_cache_dtype="fp8", gpu_memory_utilization=0.8, enforce_eager=True)
    assert ServingSettings().settings_changes(chosen) == {
        "kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.8, "enforce_eager": True,
    }
    backend = fixed_settings(overrides={"kv_cache_memory_bytes": 64 * MiB})
    assert backend.kv_cache_memory_bytes == 64 * MiB and user_fixed(backend)
    with pytest.raises(TypeError):
        fixed_settings(overrides={"no_such_setting": 1})


def test_fixed_settings_are_kept_in_every_plan(qwen7b, llama8b) -> None:
    fixed = fixed_settings(kv_cache_dtype="fp8", gpu_memory_utilization=0.85)
    result, plans = replan(RTX4090, Goal(context_tokens=16384, users=4), [qwen7b, llama8b],
                           fixed=fixed)
    assert plans and len(plans) == len(result.candidates) + len(result.rejected)
    for p in plans:
        if p.capacity is not None:
            assert p.capacity.kv_cache_dtype == "fp8"
            assert p.capacity.gpu_memory_utilization == 0.85
    for p in plans:
        if p.candidate is not None:  # the reason describes the fixed settings
            assert p.reason == capacity_reason(p.capacity, 4)
            assert "fp8 KV, utilization 0.85" in p.reason


def test_without_fixed_settings_the_recommenders_reason_stays(qwen7b) -> None:
    result, plans = replan(RTX4090, Goal(context_tokens=8192, users=2), [qwen7b])
    assert [p.reason for p in plans] == [c.reason for c in result.candidates]
    assert plans[0].fits and plans[0].launchable and not plans[0].borderline


def test_order_is_fits_then_borderline_then_the_rest(qwen7b, llama8b, gptoss) -> None:
    # a context that only some checkpoints serve on a busy card
    busy = replace(RTX4090, free_bytes=19_000 * MiB)
    _, plans = replan(busy, Goal(context_tokens=32768, users=6), [qwen7b, llama8b, gptoss])
    ranks = [0 if p.fits else 1 if p.borderline else 2 for p in plans]
    assert ranks == sorted(ranks)
    assert any(not p.fits for p in plans)
    for p in plans:
        if p.rejection is not None:
            assert not p.fits and not p.tight and p.reason == p.rejection.reason
            assert p.borderline == (p.rejection.borderline is not None)
            if p.borderline:
                assert p.capacity is not None and p.capacity.verdict == VERDICT_BORDERLINE


def test_tight_is_the_recommenders_rule(qwen7b, llama8b, gptoss) -> None:
    goal = Goal(context_tokens=32768, users=4)
    result, plans = replan(RTX4090, goal, [qwen7b, llama8b, gptoss])
    by_id = {c.model_id: c for c in result.candidates}
    for p in plans:
        if p.candidate is None:
            continue
        cand = by_id[p.model_id]
        assert p.tight == cand.tight == is_tight(p.capacity, 4)
        assert cand.kv_headroom_bytes == kv_headroom_bytes(p.capacity, 4)
        assert p.tight == (cand.kv_headroom_bytes < TIGHT_HEADROOM_BYTES)
        # the planner's "KV spare" column shows the figure the rule judges
        assert p.kv_headroom_bytes == cand.kv_headroom_bytes


def test_the_tight_threshold_sits_at_one_gib_of_kv_headroom(qwen7b) -> None:
    result, _ = replan(RTX4090, Goal(context_tokens=8192, users=2), [qwen7b])
    cap = result.candidates[0].capacity
    headroom = kv_headroom_bytes(cap, 2)
    assert headroom > GiB and not is_tight(cap, 2)
    # the same plan with less KV at the band's lower edge: just under and just over 1 GiB
    low = cap.available_kv_low_bytes
    under = replace(cap, available_kv_band_bytes=(low - headroom + GiB - 1, low))
    at = replace(cap, available_kv_band_bytes=(low - headroom + GiB, low))
    assert is_tight(under, 2) and not is_tight(at, 2)


def test_ranked_plans_mark_a_candidate_below_one_request_as_not_fitting(qwen7b) -> None:
    result, _ = replan(RTX4090, Goal(context_tokens=8192, users=2), [qwen7b])
    cand = result.candidates[0]
    starved = replace(cand, capacity=replace(cand.capacity, max_concurrency=0.5))
    plans = ranked_plans(replace(result, candidates=(starved,)), describe_fixed=True)
    assert not plans[0].fits and not plans[0].launchable
    assert plans[0].reason.endswith("; 2 users wanted")


def test_with_settings_replaces_serving_settings_only(qwen7b) -> None:
    from fitkit import rtx4090

    inputs = rtx4090(qwen7b, max_model_len=4096)
    changed = with_settings(inputs, {"kv_cache_memory_bytes": 64 * MiB, "enforce_eager": True})
    assert changed.kv_cache_memory_bytes == 64 * MiB and changed.enforce_eager
    assert changed.max_model_len == 4096 and changed.model is qwen7b
    with pytest.raises(TypeError, match="gpu_name"):
        with_settings(inputs, {"gpu_name": "other"})
