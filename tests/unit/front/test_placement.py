"""Stack or swap: the planner's split of the card between profiles (front.placement)."""

from __future__ import annotations

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.calibrate import planned_capacity
from kvpilot.core.front.placement import ProfileNeed, need_of, split
from kvpilot.core.hardware.target import from_spec


def _need(name: str, floor_gib: float, want_gib: float, fixed: bool = False) -> ProfileNeed:
    return ProfileNeed(name, int(floor_gib * GiB), int(want_gib * GiB), fixed=fixed)


def test_profiles_that_fit_share_what_is_left_by_what_they_want() -> None:
    a, b = _need("a", 6, 10), _need("b", 4, 12)
    result = split([a, b], 20 * GiB)
    assert result.fits
    # 10 GiB of floors; 10 left, wanted 4 + 8 = 12 beyond the floors: shared 4:8
    assert abs(result.share_bytes["a"] - (6 + 10 * 4 / 12) * GiB) < 2
    assert abs(result.share_bytes["b"] - (4 + 10 * 8 / 12) * GiB) < 2
    assert sum(result.share_bytes.values()) <= 20 * GiB
    assert result.utilization("a", 24 * GiB) == 0.388  # 9.33 of 24 GiB, rounded down


def test_no_more_than_wanted_and_fixed_shares_stay() -> None:
    result = split([_need("a", 2, 3), _need("b", 5, 5, fixed=True)], 20 * GiB)
    assert result.share_bytes == {"a": 3 * GiB, "b": 5 * GiB}


def test_floors_that_do_not_fit_swap_with_the_reason() -> None:
    result = split([_need("a", 12, 14), _need("b", 10, 11)], 20 * GiB, held_bytes=0)
    assert not result.fits and not result.share_bytes
    assert "need a 12.00 + b 10.00 = 22.00 GiB" in result.reason
    held = split([_need("b", 10, 11)], 20 * GiB, held_bytes=12 * GiB)
    assert not held.fits and "8.00 GiB of the 20.00 GiB budget is free" in held.reason


def test_need_of_a_planned_profile(qwen7b: ModelSpec) -> None:
    card = from_spec("RTX 4090")
    assert card is not None
    inputs = card.plan_inputs(qwen7b, "0.33.0", PlanInputs(
        model=qwen7b, gpu_total_bytes=card.total_bytes, max_model_len=8192, max_num_seqs=4,
        gpu_memory_utilization=0.9).settings)
    cap = planned_capacity(inputs, None)
    need = need_of("chat", cap)
    held = sum(t.bytes for t in cap.terms if t.name not in ("requested", "kv_cache"))
    assert need.floor_bytes == held + cap.kv_bytes_per_token * 8192
    assert need.want_bytes == held + cap.kv_bytes_per_token * 8192 * 4
    assert need.floor_bytes > cap.weights_bytes and need.asleep_bytes == cap.non_torch_bytes
    fixed = need_of("chat", cap, fixed_utilization=True)
    assert fixed.floor_bytes == fixed.want_bytes == cap.requested_bytes and fixed.fixed
