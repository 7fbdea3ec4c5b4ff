"""The planner's LoRA and drafter inputs: into the goal, into the settings every ranked plan
keeps, back from a stored profile."""

from __future__ import annotations

import json


def test_lora_and_drafter_inputs_reach_the_goal_and_the_plans(qtbot) -> None:
    from kvpilot.gui.controllers.profiles import adapter_goal_fields, goal_of, with_goal
    from kvpilot.gui.panels.planner_panel import PlannerPanel

    panel = PlannerPanel()
    qtbot.addWidget(panel)
    assert not panel.adapters.lora_rank.isEnabled()
    goal = panel.goal()
    assert goal.adapter_settings() == {}
    panel.adapters.lora_slots.setValue(4)
    panel.adapters.lora_rank.setCurrentIndex(panel.adapters.lora_rank.findData(64))
    panel.adapters.drafter.setCurrentIndex(panel.adapters.drafter.findData("ngram"))
    panel.adapters.draft_tokens.setValue(3)
    assert panel.adapters.lora_rank.isEnabled() and panel.adapters.draft_tokens.isEnabled()
    with qtbot.waitSignal(panel.goal_changed, timeout=2_000) as got:
        panel.adapters.draft_tokens.setValue(4)
    goal = got.args[0]
    assert (goal.lora_slots, goal.lora_rank, goal.speculative_method,
            goal.speculative_tokens) == (4, 64, "ngram", 4)
    settings = goal.adapter_settings()
    assert settings["enable_lora"] and settings["max_loras"] == 4
    assert settings["max_lora_rank"] == 64
    assert json.loads(settings["speculative_config"]) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}

    from kvpilot.core import settings as st

    profile = with_goal(st.Profile(name="p"), goal)
    assert profile.plan.enable_lora and profile.plan.max_loras == 4
    assert goal_of(profile).speculative_tokens == 4
    assert adapter_goal_fields(profile.plan)["lora_rank"] == 64
    panel.set_goal(goal_of(profile))
    assert panel.adapters.values() == (4, 64, "ngram", 4)


def test_a_command_line_drafter_survives_the_planner(qtbot) -> None:
    from dataclasses import replace

    from kvpilot.core import settings as st
    from kvpilot.gui.controllers.profiles import goal_of, with_goal

    eagle = json.dumps({"method": "eagle3", "model": "org/head", "num_speculative_tokens": 2})
    profile = st.Profile(name="p")
    profile = replace(profile, plan=replace(profile.plan, speculative_config=eagle))
    goal = goal_of(profile)
    assert goal.speculative_method == ""  # the inputs offer no EAGLE-3
    assert with_goal(profile, goal).plan.speculative_config == eagle
