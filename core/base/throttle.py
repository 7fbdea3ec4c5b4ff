"""Why the GPU's clocks are held down: NVML's clock-event (formerly "throttle") reason bits.

NVML reports a bit mask (``nvml.h``: ``nvmlClocksEventReason*``, older drivers and bindings
``nvmlClocksThrottleReason*``; the bits are the same). Some bits only describe the clock policy
(an idle GPU, application clocks, sync boost); the ones in :data:`SLOWING_MASK` mean the card
runs slower than it would otherwise (the power cap, a thermal limit, a hardware slowdown), which
is what a load test or the dashboard must flag.

Base vocabulary: the sampler, the probe, the live telemetry, ``kvpilot gpu`` and the dashboard
word the mask alike. Pure: the NVML call itself goes through
:class:`~kvpilot.core.hardware.nvml.Nvml`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MASK_FUNCTIONS",
    "REASONS",
    "SLOWING_MASK",
    "ThrottleReason",
    "is_throttled",
    "reason_words",
    "slowing_bits",
    "throttle_text",
]


@dataclass(frozen=True)
class ThrottleReason:
    """One reason bit: its value, the pynvml constant suffix, words for a user, and whether
    it slows the card."""

    bit: int
    name: str  # suffix after nvmlClocksEventReason / nvmlClocksThrottleReason
    words: str
    slows: bool


#: every reason NVML names, lowest bit first (values from nvml.h, names as in pynvml)
REASONS: tuple[ThrottleReason, ...] = (
    ThrottleReason(0x1, "GpuIdle", "idle", slows=False),
    ThrottleReason(0x2, "ApplicationsClocksSetting", "application clocks setting", slows=False),
    ThrottleReason(0x4, "SwPowerCap", "power cap", slows=True),
    ThrottleReason(0x8, "HwSlowdown", "hardware slowdown", slows=True),
    ThrottleReason(0x10, "SyncBoost", "sync boost", slows=False),
    ThrottleReason(0x20, "SwThermalSlowdown", "thermal", slows=True),
    ThrottleReason(0x40, "HwThermalSlowdown", "hardware thermal slowdown", slows=True),
    ThrottleReason(0x80, "HwPowerBrakeSlowdown", "power brake", slows=True),
    ThrottleReason(0x100, "DisplayClockSetting", "display clock setting", slows=False),
    ThrottleReason(0x200, "BoardLimit", "board limit", slows=False),
    ThrottleReason(0x400, "Reliability", "reliability limit", slows=False),
)

#: the bits that mean the clocks are lower than the load asks for
SLOWING_MASK: int = sum(r.bit for r in REASONS if r.slows)

#: the NVML functions that read the current mask, newest name first (the older one remains in
#: drivers and bindings from before the rename, and is deprecated in newer ones)
MASK_FUNCTIONS: tuple[str, ...] = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)


def slowing_bits(mask: int | None) -> int:
    """The bits of ``mask`` that slow the card (0 for None: nothing known)."""
    return 0 if mask is None else int(mask) & SLOWING_MASK


def is_throttled(mask: int | None) -> bool:
    """True when ``mask`` has a reason that slows the card (power cap, thermal, hardware
    slowdown, power brake); False for policy-only bits and for None (not reported)."""
    return slowing_bits(mask) != 0


def reason_words(mask: int | None, *, slowing_only: bool = False) -> tuple[str, ...]:
    """Words for each reason set in ``mask``, lowest bit first; an unknown bit is named by its
    value (``"0x1000"``). Empty for None or 0. ``slowing_only`` keeps the slowing ones."""
    if not mask:
        return ()
    mask = int(mask)
    out: list[str] = []
    known = 0
    for reason in REASONS:
        known |= reason.bit
        if mask & reason.bit and (reason.slows or not slowing_only):
            out.append(reason.words)
    if not slowing_only:
        rest = mask & ~known
        bit = 1
        while rest:
            if rest & bit:
                out.append(f"0x{bit:x}")
                rest &= ~bit
            bit <<= 1
    return tuple(out)


def throttle_text(mask: int | None) -> str:
    """One phrase for a summary line: ``"throttled: power cap, thermal"``, ``"not throttled"``,
    or ``"throttle not reported"`` for None."""
    if mask is None:
        return "throttle not reported"
    words = reason_words(mask, slowing_only=True)
    return f"throttled: {', '.join(words)}" if words else "not throttled"
