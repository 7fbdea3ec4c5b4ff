"""The failure banner: each button carries its fallback option."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.core.app.launch import FallbackChoice
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.gui.widgets.fallback_banner import FallbackBanner

METRICS = DATA / "metrics"


def test_banner_buttons_carry_their_option(qtbot) -> None:
    banner = FallbackBanner()
    qtbot.addWidget(banner)
    spec = LaunchSpec(model="m")
    opts = [
        FallbackChoice("context 16,384 — fits 4 users", spec, None, {"max_model_len": 16384}),
        FallbackChoice("fp8 KV — 32k fits 4 users", spec, None, {"kv_cache_dtype": "fp8"}),
    ]
    banner.show_failure(
        "32,768-token context needs 1.75 GiB of KV cache, 0.90 GiB is available.", opts
    )
    assert banner.isVisible()
    assert banner.option_buttons[0].text().startswith("context 16,384")
    assert banner.option_buttons[1].toolTip() == "fp8 KV — 32k fits 4 users"
    with qtbot.waitSignal(banner.option_chosen) as sig:
        banner.option_buttons[1].click()
    assert sig.args == [opts[1]]
    assert not any(b.isEnabled() for b in banner.option_buttons)  # no double relaunch
