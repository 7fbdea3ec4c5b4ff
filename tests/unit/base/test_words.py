"""How a count reads: a noun that agrees, a concurrency and a rate with separators and sensible
precision, a shortfall told only when there is one, clauses joined without ".;"."""

from __future__ import annotations

from kvpilot.core.base.units import GiB
from kvpilot.core.base.words import (
    counted,
    estimated_rate,
    join_clauses,
    more_kv_text,
    significant,
    times_text,
)


def test_a_noun_agrees_with_its_number() -> None:
    assert counted(1, "user") == "1 user"
    assert counted(4, "user") == "4 users"
    assert counted(0, "run") == "0 runs"
    assert counted(1024, "token") == "1,024 tokens"
    assert counted(2, "query", "queries") == "2 queries"


def test_a_concurrency_has_one_decimal_below_100_and_separators_above() -> None:
    assert times_text(5.94) == "5.9x"
    assert times_text(99.94) == "99.9x"
    assert times_text(43189.3) == "43,189x"
    assert times_text(152.4, "×") == "152×"


def test_an_estimated_rate_has_three_significant_figures_and_separators() -> None:
    assert estimated_rate(288110.4) == "~288,000 tok/s"
    assert estimated_rate(58.4) == "~58 tok/s"
    assert estimated_rate(1234.5) == "~1,230 tok/s"
    assert significant(0.47) == "0.47"
    assert significant(0) == "0"


def test_a_shortfall_is_told_only_when_there_is_one() -> None:
    assert more_kv_text(int(2.6 * GiB)) == "needs 2.6 GiB more KV"
    assert more_kv_text(-int(0.01 * GiB)) == ""  # was "needs -0.0 GiB more KV"
    assert more_kv_text(int(0.01 * GiB)) == ""  # rounds to 0.0
    assert more_kv_text(None) == ""


def test_clauses_join_without_doubled_punctuation() -> None:
    reason = "weights take 28.20 of the 21.29 GiB requested."
    assert join_clauses(reason, "needs 3.0 GiB more KV") == (
        "weights take 28.20 of the 21.29 GiB requested; needs 3.0 GiB more KV"
    )
    assert join_clauses(reason, "") == reason
    assert join_clauses("", "needs 1.0 GiB more KV") == "needs 1.0 GiB more KV"
