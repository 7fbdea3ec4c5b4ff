"""Energy a GPU used over a time window, and joules per generated token.

Pure: reads GPU samples (duck-typed :class:`~kvpilot.core.hardware.sampler.GpuSample`: any
object with ``t_monotonic_s``, ``ok``, ``power_w``, ``energy_mj``, ``throttle_reasons_mask``)
that someone else took, and never talks to NVML.

Two sources, best first:

* ``"counter"``: NVML's energy counter (millijoules since the driver loaded, Volta and newer).
  The samples bracketing the window give the mean power over it, times the window's length.
* ``"integrated"``: the trapezoid integral of the sampled power draw over the window (the
  draw interpolated at the window's edges), for drivers without the counter, or a counter that
  went backwards (driver reloaded mid-window).

A window is throttled when any sample in it has a clock-event reason that slows the card
(power cap, thermal, hardware slowdown; see :mod:`kvpilot.core.base.throttle`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from kvpilot.core.base.throttle import is_throttled, reason_words

__all__ = ["EnergySource", "GpuEnergy", "gpu_energy", "joules_per_token", "throttle_note"]

EnergySource = Literal["counter", "integrated"]


@dataclass(frozen=True)
class GpuEnergy:
    """What the GPU did during one window (a load-test level).

    ``energy_j`` joules over ``duration_s`` seconds (``mean_power_w`` = their ratio);
    ``j_per_token`` joules per generated token (None without tokens); ``source`` is
    ``"counter"`` or ``"integrated"``. ``throttled`` is None when no sample reported a
    throttle mask; ``throttle_reasons`` words for the slowing reasons seen (OR of the masks,
    ``throttle_reasons_mask``). ``samples`` counts the GPU samples inside the window.
    """

    energy_j: float
    duration_s: float
    mean_power_w: float
    j_per_token: float | None
    source: EnergySource
    throttled: bool | None
    throttle_reasons: tuple[str, ...]
    throttle_reasons_mask: int | None
    samples: int


def joules_per_token(energy_j: float, tokens: int) -> float | None:
    """``energy_j / tokens``; None when no token was generated."""
    return energy_j / tokens if tokens > 0 else None


def _bracket(points: Sequence[tuple[float, float]], t0: float, t1: float
             ) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The last point at or before ``t0`` (else the first after it) and the first at or after
    ``t1`` (else the last before it); None when they do not span any time."""
    before = [p for p in points if p[0] <= t0]
    after = [p for p in points if p[0] >= t1]
    if not points:
        return None
    start = before[-1] if before else points[0]
    end = after[0] if after else points[-1]
    if end[0] <= start[0]:
        return None
    return start, end


def _from_counter(samples: Sequence[Any], t0: float, t1: float) -> float | None:
    points = [(float(s.t_monotonic_s), float(s.energy_mj)) for s in samples
              if s.energy_mj is not None]
    pair = _bracket(points, t0, t1)
    if pair is None:
        return None
    (ta, ea), (tb, eb) = pair
    if eb < ea:  # the counter restarted (driver reloaded): not usable for this window
        return None
    mean_w = (eb - ea) / 1000.0 / (tb - ta)
    return mean_w * (t1 - t0)


def _integrated(samples: Sequence[Any], t0: float, t1: float) -> float | None:
    points = [(float(s.t_monotonic_s), float(s.power_w)) for s in samples
              if s.power_w is not None]
    if len(points) < 2 or _bracket(points, t0, t1) is None:
        return None
    t = np.array([p[0] for p in points])
    w = np.array([p[1] for p in points])
    grid = np.concatenate(([t0], t[(t > t0) & (t < t1)], [t1]))
    power = np.interp(grid, t, w)  # held constant beyond the first and last sample
    return float(np.sum((power[1:] + power[:-1]) * np.diff(grid)) / 2.0)


def gpu_energy(
    samples: Sequence[Any], t_start_s: float, t_end_s: float, tokens: int = 0
) -> GpuEnergy | None:
    """Energy, throttling and J/token between two monotonic times.

    Args:
        samples: GPU samples, oldest first; failed ones (``ok`` False) are ignored.
        t_start_s: window start, monotonic seconds.
        t_end_s: window end, monotonic seconds.
        tokens: tokens generated in the window (for ``j_per_token``).

    Return:
        None when the samples do not cover the window with either source.

    Raises:
        ValueError: ``t_end_s`` is not after ``t_start_s``, or ``tokens`` is negative.
    """
    if not t_end_s > t_start_s:
        raise ValueError(f"the window must end after it starts ({t_start_s} .. {t_end_s})")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    good = [s for s in samples if getattr(s, "ok", True)]
    source: EnergySource = "counter"
    energy = _from_counter(good, t_start_s, t_end_s)
    if energy is None:
        source = "integrated"
        energy = _integrated(good, t_start_s, t_end_s)
    if energy is None:
        return None
    inside = [s for s in good if t_start_s <= s.t_monotonic_s <= t_end_s]
    masks = [int(s.throttle_reasons_mask) for s in inside if s.throttle_reasons_mask is not None]
    mask: int | None = None
    for m in masks:
        mask = m if mask is None else mask | m
    duration = t_end_s - t_start_s
    return GpuEnergy(
        energy_j=energy,
        duration_s=duration,
        mean_power_w=energy / duration,
        j_per_token=joules_per_token(energy, tokens),
        source=source,
        throttled=None if mask is None else is_throttled(mask),
        throttle_reasons=reason_words(mask, slowing_only=True),
        throttle_reasons_mask=mask,
        samples=len(inside),
    )


def throttle_note(levels: Sequence[Any]) -> str | None:
    """One sentence naming the load-test levels (duck-typed: ``concurrency`` and ``gpu``, a
    :class:`GpuEnergy` or None) during which the GPU was throttled, and why; None when none
    was (or nothing was sampled)."""
    hot = [lv for lv in levels if lv.gpu is not None and lv.gpu.throttled]
    if not hot:
        return None
    reasons = dict.fromkeys(r for lv in hot for r in lv.gpu.throttle_reasons)
    return (
        f"the GPU was throttled at concurrency {', '.join(str(lv.concurrency) for lv in hot)}"
        f" ({', '.join(reasons) or 'a slowdown reason'}): the numbers there are lower than the "
        "card can do cool"
    )
