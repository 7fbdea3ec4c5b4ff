"""The planner's LoRA and drafter inputs: into the pinned settings every ranked plan keeps,
back from a stored profile, and a command-line drafter the inputs do not offer kept."""

from __future__ import annotations

import json
from dataclasses import replace


def test_lora_and_drafter_inputs_reach_the_pinned_settings(qtbot) -> None:
    from kvpilot.core.app import settings as st
    from kvpilot.gui.controllers.profiles import request_of, with_request
    from kvpilot.gui.panels.planner_panel import PlannerPanel

    panel = PlannerPanel()
    qtbot.addWidget(panel)
    assert not panel.adapters.lora_rank.isEnabled()
    pinned = panel.request().pinned
    assert not pinned.enable_lora and pinned.speculative_config is None
    panel.adapters.lora_slots.setValue(4)
    panel.adapters.lora_rank.setCurrentIndex(panel.adapters.lora_rank.findData(64))
    panel.adapters.drafter.setCurrentIndex(panel.adapters.drafter.findData("ngram"))
    assert panel.adapters.lora_rank.isEnabled() and panel.adapters.draft_tokens.isEnabled()
    with qtbot.waitSignal(panel.goal_changed, timeout=2_000) as got:
        panel.adapters.draft_tokens.setValue(4)
    pinned = got.args[0].pinned
    assert pinned.enable_lora and pinned.max_loras == 4 and pinned.max_lora_rank == 64
    assert json.loads(pinned.speculative_config) == {
        "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}

    profile = with_request(st.Profile(name="p"), got.args[0])
    assert profile.plan.enable_lora and profile.plan.max_loras == 4
    other = PlannerPanel()
    qtbot.addWidget(other)
    other.set_request(request_of(profile))
    assert other.adapters.values() == (4, 64, "ngram", 4)


def test_a_command_line_drafter_survives_the_planner(qtbot) -> None:
    from kvpilot.core.app import settings as st
    from kvpilot.gui.controllers.profiles import request_of
    from kvpilot.gui.panels.planner_panel import PlannerPanel

    eagle = json.dumps({"method": "eagle3", "model": "org/head", "num_speculative_tokens": 2})
    profile = st.Profile(name="p")
    profile = replace(profile, plan=replace(profile.plan, speculative_config=eagle))
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.set_request(request_of(profile))
    assert panel.adapters.values()[2] == ""  # the inputs offer no EAGLE-3
    assert panel.request().pinned.speculative_config == eagle
