"""Helpers of the fault tests (tests/faults): the event-loop lateness probe and the block it
catches.

The GUI's goal (nothing blocks the event loop longer than 50 ms) is measured and printed by
``benchmarks/gui_responsiveness.py``; a wall-clock goal that tight fails on a busy two-core
machine without any fault (a 52 ms tick on a loaded CI runner). The fault tests catch what the
faults they guard against did: a join of a stuck sampler thread for 2 to 5 s on the GUI thread,
a pool thread held for a download of minutes (checked directly: no pool thread is busy).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

#: a block of the event loop the tests call a fault: one second, half the shortest block these
#: tests guard against (a 2 s join) and 20x the GUI's goal (``benchmarks/gui_responsiveness.py``,
#: 50 ms); on a two-core machine loaded with two busy loops and a test run beside it the worst
#: tick was 431 ms late
BLOCKED_S = 1.0


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
