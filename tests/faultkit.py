"""Helpers of the fault tests (tests/faults): the event-loop lateness probe and its goal."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

#: the GUI's goal: nothing blocks the event loop longer than this
EVENT_LOOP_BUDGET_S = 0.050


@dataclass
class LoopProbe:
    """Ticks of a 5 ms precise QTimer; the longest gap between two ticks is the worst block."""

    interval_s: float = 0.005
    ticks: list[float] = field(default_factory=list)

    def tick(self) -> None:
        self.ticks.append(time.perf_counter())

    @property
    def worst_lateness_s(self) -> float:
        """Longest gap between ticks beyond the interval (seconds)."""
        gaps = [b - a for a, b in zip(self.ticks, self.ticks[1:], strict=False)]
        return max(gaps, default=0.0) - self.interval_s
