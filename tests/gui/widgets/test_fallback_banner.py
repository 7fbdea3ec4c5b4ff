"""The failure banner: each button carries its fallback option."""

from __future__ import annotations

from PySide6.QtCore import Qt
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
    assert banner.option_buttons[1].toolTip() == "fp8 KV — 32k fits 4 users (Alt+2)"
    with qtbot.waitSignal(banner.option_chosen) as sig:
        banner.option_buttons[1].click()
    assert sig.args == [opts[1]]
    assert not any(b.isEnabled() for b in banner.option_buttons)  # no double relaunch


def test_alt_and_the_option_number_press_that_option(qtbot) -> None:
    banner = FallbackBanner()
    qtbot.addWidget(banner)
    spec = LaunchSpec(model="m")
    opts = [FallbackChoice(f"option {n}", spec, None, {}) for n in range(3)]
    banner.show_failure("KV cache too small.", opts)
    banner.show()
    qtbot.waitExposed(banner)
    banner.activateWindow()
    qtbot.waitUntil(banner.isActiveWindow)
    assert banner.option_buttons[1].shortcut().toString() == "Alt+2"
    with qtbot.waitSignal(banner.option_chosen) as sig:
        qtbot.keyClick(banner, Qt.Key.Key_2, Qt.KeyboardModifier.AltModifier)
    assert sig.args == [opts[1]]


def test_long_option_labels_wrap_onto_rows_and_keep_the_full_text(qtbot) -> None:
    banner = FallbackBanner()
    qtbot.addWidget(banner)
    spec = LaunchSpec(model="m")
    labels = [
        "fits 4 users, 134,064 KV tokens",
        "does not fit (512 KV tokens for a 4,096-token request)",
        "context 2,048 — does not fit (512 KV tokens for a 2,048-token request), "
        "utilization 0.80 and eager mode left as they were, the block size and the prefix "
        "cache as the failed launch had them",
        "fp8 KV — does not fit (1,024 KV tokens for a 4,096-token request)",
    ]
    opts = [FallbackChoice(t, spec, None, {}) for t in labels]
    banner.show_failure("KV cache too small.", opts)
    wide = sum(b.sizeHint().width() for b in banner.option_buttons)
    assert banner.minimumSizeHint().width() < wide  # not one row's worth of width
    banner.resize(700, banner.heightForWidth(700))
    banner.show()
    qtbot.waitExposed(banner)
    rows = {b.y() for b in banner.option_buttons}
    assert len(rows) >= 2
    for b in [*banner.option_buttons, banner._details]:
        assert b.x() >= 0 and b.x() + b.width() <= banner.width(), b.text()
    long_one = banner.option_buttons[2]
    assert long_one.text() != labels[2] and "…" in long_one.text()
    assert labels[2] in long_one.toolTip()
    assert long_one.accessibleName() == labels[2]
