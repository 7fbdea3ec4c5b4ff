"""The planner's --language-model-only ("text only") and nvfp4 KV inputs reach the pinned
settings and come back from a stored profile."""

from __future__ import annotations


def test_text_only_and_nvfp4_reach_the_pinned_settings_and_come_back(qtbot) -> None:
    from kvpilot.core.app import settings as st
    from kvpilot.gui.controllers.profiles import request_of, with_request
    from kvpilot.gui.panels.planner_panel import PlannerPanel

    panel = PlannerPanel()
    qtbot.addWidget(panel)
    pinned = panel.request().pinned
    assert not pinned.language_model_only and pinned.kv_cache_dtype == "auto"
    panel.kv_dtype.setCurrentIndex(panel.kv_dtype.findData("nvfp4"))
    with qtbot.waitSignal(panel.goal_changed, timeout=2_000) as got:
        panel.language_only.setChecked(True)
    pinned = got.args[0].pinned
    assert pinned.language_model_only and pinned.kv_cache_dtype == "nvfp4"

    profile = with_request(st.Profile(name="p"), got.args[0])
    assert profile.plan.language_model_only and profile.plan.kv_cache_dtype == "nvfp4"
    other = PlannerPanel()
    qtbot.addWidget(other)
    other.set_request(request_of(profile))
    assert other.language_only.isChecked()
    assert other.kv_dtype.currentData() == "nvfp4"
