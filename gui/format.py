"""One unit per kind of number: GiB for memory, thousands separators for tokens, s/ms for latency.

Pure functions (no Qt) so that every panel prints the same figure the same way.
"""

from __future__ import annotations

import math

from kvpilot.core.base.units import GiB, gib_text

GIB = float(GiB)


def gib(n_bytes: float | None, decimals: int = 2) -> str:
    """``"14.02 GiB"``; ``"–"`` for unknown."""
    if n_bytes is None or (isinstance(n_bytes, float) and math.isnan(n_bytes)):
        return "–"
    return gib_text(n_bytes, decimals)


def gib_num(n_bytes: float | None, decimals: int = 1) -> str:
    """``"14.0"`` (GiB without the unit, for compact labels)."""
    if n_bytes is None:
        return "–"
    return f"{n_bytes / GIB:.{decimals}f}"


def tokens(n: float | None) -> str:
    """``"141,312"``; ``"–"`` for unknown."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "–"
    return f"{round(n):,}"


def context(n: int | None) -> str:
    """A context length, compact: ``"32k"`` for 32768, ``"1,000"`` otherwise."""
    if n is None:
        return "–"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n:,}"


def latency(seconds: float | None) -> str:
    """``"17 ms"`` below one second, ``"1.24 s"`` above; ``"–"`` for unknown."""
    if seconds is None or math.isnan(seconds):
        return "–"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1.0:
        return f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s"


def rate(per_s: float | None, unit: str = "tok/s") -> str:
    """``"58 tok/s"``."""
    if per_s is None or math.isnan(per_s):
        return "–"
    return f"{per_s:,.0f} {unit}"


def duration(seconds: float) -> str:
    """``"00:12:31"`` (hours:minutes:seconds)."""
    s = max(0, int(seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def percent(fraction: float | None, decimals: int = 0) -> str:
    """``"94 %"`` from 0.94."""
    if fraction is None or math.isnan(fraction):
        return "–"
    return f"{fraction * 100:.{decimals}f} %"
