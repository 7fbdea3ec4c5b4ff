"""Clock-event (throttle) reason bits: values and names as pynvml has them, words, slowing mask."""

from __future__ import annotations

import pytest

from kvpilot.core.base.throttle import (
    MASK_FUNCTIONS,
    REASONS,
    SLOWING_MASK,
    is_throttled,
    reason_words,
    slowing_bits,
    throttle_text,
)


def test_bits_match_the_installed_bindings() -> None:
    pynvml = pytest.importorskip("pynvml")
    for reason in REASONS:
        values = {
            getattr(pynvml, prefix + reason.name)
            for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason")
            if hasattr(pynvml, prefix + reason.name)
        }
        assert values == {reason.bit}, reason.name
    for function in MASK_FUNCTIONS:
        assert callable(getattr(pynvml, function, None)), function


def test_bits_are_distinct_single_bits() -> None:
    bits = [r.bit for r in REASONS]
    assert len(set(bits)) == len(bits)
    assert all(b & (b - 1) == 0 for b in bits)


def test_slowing_mask_is_power_thermal_and_hardware() -> None:
    assert SLOWING_MASK == 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    assert MASK_FUNCTIONS[0] == "nvmlDeviceGetCurrentClocksEventReasons"


@pytest.mark.parametrize(
    ("mask", "throttled"),
    [(None, False), (0, False), (0x1, False), (0x2 | 0x10 | 0x100, False), (0x4, True),
     (0x20, True), (0x8, True), (0x40, True), (0x80, True), (0x1 | 0x4, True)],
)
def test_is_throttled(mask: int | None, throttled: bool) -> None:
    assert is_throttled(mask) is throttled


def test_words() -> None:
    assert reason_words(None) == () and reason_words(0) == ()
    assert reason_words(0x1) == ("idle",)
    assert reason_words(0x4 | 0x20) == ("power cap", "thermal")
    assert reason_words(0x8 | 0x1) == ("idle", "hardware slowdown")
    assert reason_words(0x8 | 0x1, slowing_only=True) == ("hardware slowdown",)
    assert reason_words(0x1000 | 0x4) == ("power cap", "0x1000")
    assert slowing_bits(0x1 | 0x4 | 0x200) == 0x4 and slowing_bits(None) == 0


def test_text() -> None:
    assert throttle_text(None) == "throttle not reported"
    assert throttle_text(0x1) == "not throttled"
    assert throttle_text(0x4 | 0x40) == "throttled: power cap, hardware thermal slowdown"
