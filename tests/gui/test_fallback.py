"""The failure banner: each button carries its fallback option."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.gui.fallback import FallbackBanner, FallbackChoice

METRICS = DATA / "metrics"


def test_banner_buttons_carry_their_option(qtbot) -> None:
    banner = FallbackBanner()
    qtbot.addWidget(banner)
    opts = [object(), object()]
    banner.show_failure(
        "32,768-token context needs 1.75 GiB of KV cache, 0.90 GiB is available.",
        [
            FallbackChoice("context 16,384 — fits 4 users", "shorter context", opts[0]),
            FallbackChoice("fp8 KV — 32k fits 4 users", "fp8", opts[1]),
        ],
    )
    assert banner.isVisible()
    assert banner.option_buttons[0].text().startswith("context 16,384")
    with qtbot.waitSignal(banner.option_chosen) as sig:
        banner.option_buttons[1].click()
    assert sig.args == [opts[1]]
    assert not any(b.isEnabled() for b in banner.option_buttons)  # no double relaunch
