"""The utilization a plan or a launch uses where the user left it open: the application layer's
one decision for the command line and the window (core/app/launch_settings.py)."""

from __future__ import annotations

from dataclasses import replace

from kvpilot.core.app.launch_settings import (
    choose_utilization,
    planned_settings,
    with_chosen_utilization,
)
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import budget
from kvpilot.core.fit.recommend import MAX_UTILIZATION, utilization_for
from kvpilot.core.hardware.target import cpu_target, from_size

#: a 24 GiB card with 22 GiB free: a desktop holds 2 GiB
DESKTOP = from_size(24 * GiB, 22 * GiB, name="RTX 4090")


def test_none_given_is_the_most_that_passes_the_start_up_check_and_says_why() -> None:
    choice = choose_utilization(DESKTOP, ServingSettings(), "0.33.0")
    assert choice.automatic
    assert choice.utilization == utilization_for(DESKTOP.card())
    passing = budget.max_passing_utilization(24 * GiB, 22 * GiB)
    assert choice.utilization == passing < 0.92
    assert f"utilization {passing:.2f} chosen automatically" in choice.sentence
    assert "22.00 GiB of 24.00 GiB free" in choice.sentence
    # vLLM 0.33's own default would be refused: the sentence says so
    assert "vLLM's own default 0.92 would not start" in choice.sentence
    assert choice.to_json() == {"gpu_memory_utilization": passing, "automatic": True,
                                "reason": choice.sentence}


def test_an_idle_card_is_capped() -> None:
    idle = from_size(24 * GiB, 24 * GiB - 64 * 2**20, name="RTX 4090")
    choice = choose_utilization(idle, ServingSettings(), "0.33.0")
    assert choice.utilization == MAX_UTILIZATION
    assert "the cap kvpilot keeps" in choice.sentence
    assert "would not start" not in choice.sentence


def test_what_the_user_gave_is_kept_and_nothing_is_said() -> None:
    given = choose_utilization(DESKTOP, ServingSettings(gpu_memory_utilization=0.7))
    assert (given.utilization, given.automatic, given.sentence) == (0.7, False, "")
    sized = choose_utilization(DESKTOP, ServingSettings(kv_cache_memory_bytes=GiB))
    assert (sized.utilization, sized.automatic) == (None, False)


def test_nothing_read_leaves_vllms_default() -> None:
    named = from_size(24 * GiB, None, name="RTX 4090")  # --gpu-total-mib, no free memory
    assert choose_utilization(named, ServingSettings()).utilization is None
    assert not choose_utilization(cpu_target(), ServingSettings()).automatic


def test_settings_carry_the_choice_for_a_single_gpu_only() -> None:
    settings, choice = with_chosen_utilization(ServingSettings(max_model_len=8192), DESKTOP)
    assert settings.gpu_memory_utilization == choice.utilization
    assert settings.max_model_len == 8192
    fixed, _ = planned_settings(DESKTOP, ServingSettings())
    assert fixed.gpu_memory_utilization == choice.utilization
    pair = replace(DESKTOP, gpu_indices=(0, 1))
    kept, pair_choice = planned_settings(pair, ServingSettings())
    assert pair_choice.automatic and kept.gpu_memory_utilization is None
