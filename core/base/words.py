"""How kvpilot writes a count for a reader, the same on the command line and in the window:
a noun that agrees with its number, a concurrency (``5.9x``, ``43,189x``), an estimated rate
(``~58 tok/s``, ``~288,000 tok/s``), a shortfall worth telling, and two clauses joined without
doubled punctuation."""

from __future__ import annotations

from kvpilot.core.base.units import GiB

#: a shortfall below this is not told as "needs X GiB more KV" (it would print 0.0 or less)
SHORTFALL_SHOWN_BYTES = 0.05 * GiB


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 user``, ``4 users``, ``1,024 tokens``: ``n`` with separators and the noun that agrees
    (``plural`` when adding an ``s`` is wrong)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def times_text(x: float, sign: str = "x") -> str:
    """A concurrency or a ratio: one decimal below 100 (``5.9x``), whole numbers with thousands
    separators above (``43,189x``)."""
    return f"{x:.1f}{sign}" if x < 100 else f"{x:,.0f}{sign}"


def significant(x: float, digits: int = 3) -> str:
    """``x`` rounded to ``digits`` significant figures, whole numbers with separators:
    ``288,110.4`` -> ``288,000``; ``58.4`` -> ``58``; ``0.47`` -> ``0.47``."""
    if x == 0:
        return "0"
    if abs(x) >= 10 ** (digits - 1):
        exponent = len(str(int(abs(x)))) - digits
        return f"{round(x, -exponent):,.0f}"
    return f"{x:.{digits - 1}g}" if abs(x) < 1 else f"{x:.0f}"


def estimated_rate(per_s: float, unit: str = "tok/s") -> str:
    """An estimate of a rate: ``~58 tok/s``, ``~288,000 tok/s`` (three significant figures:
    an estimate is no more precise than that)."""
    return f"~{significant(per_s)} {unit}"


def join_clauses(first: str, second: str, sep: str = "; ") -> str:
    """``first`` and ``second`` as one sentence: ``first``'s closing full stop dropped before
    ``sep`` (never ``.; ``); either may be empty."""
    if not first:
        return second
    if not second:
        return first
    return first.rstrip().rstrip(".") + sep + second


def more_kv_text(shortfall_bytes: int | None) -> str:
    """``needs 2.6 GiB more KV``, or ``""`` when there is no shortfall worth telling (none, a
    negative one: the plan fails for another reason, or one that rounds to 0.0)."""
    if shortfall_bytes is None or shortfall_bytes < SHORTFALL_SHOWN_BYTES:
        return ""
    return f"needs {shortfall_bytes / GiB:.1f} GiB more KV"
