"""The feature table is the one source of per-release facts: the removed-flag table, the fit
engine's per-release rows and the fallbacks' flags all agree with it."""

from __future__ import annotations

import pytest

from kvpilot.core.base import versions
from kvpilot.core.base.versions import FEATURES, Release, supports
from kvpilot.core.fit import activation
from kvpilot.core.runtimes.discovery import REMOVED_FLAGS, removed_flag_message


def _row_for_flag(flag: str) -> versions.Feature:
    rows = [f for f in FEATURES.values() if f.flag == flag]
    assert len(rows) == 1, f"{flag}: {len(rows)} rows in versions.FEATURES"
    return rows[0]


@pytest.mark.parametrize("flag", sorted(REMOVED_FLAGS))
def test_every_removed_flag_has_the_feature_tables_release(flag: str) -> None:
    removed = REMOVED_FLAGS[flag]
    row = _row_for_flag(flag)
    assert row.until is not None
    if removed.removed_in is None:
        assert not row.until_exact  # only a bound is known, and the message says so
    else:
        assert removed.removed_in == row.until
        assert not supports(row.name, removed.removed_in)
    assert removed.readded_in == row.back_in
    assert row.source


def test_every_removed_row_of_the_table_is_in_the_runtime_table() -> None:
    assert {f.flag for f in versions.removed_flags()} == set(REMOVED_FLAGS)


def test_cuda_graph_sizes_left_in_0_13() -> None:
    # the 0.12.0 wheel's engine/arg_utils.py still adds --cuda-graph-sizes; 0.13.0's does not
    row = _row_for_flag("--cuda-graph-sizes")
    assert row.until == "0.13.0"
    assert supports(row.name, "0.12.0")
    assert supports(row.name, "0.12.9")
    assert not supports(row.name, "0.13.0")
    assert not supports(row.name, "0.13.0rc1")
    assert "removed in vLLM 0.13.0" in removed_flag_message("--cuda-graph-sizes", "0.20.0")


def test_a_readded_flag_counts_again() -> None:
    row = _row_for_flag("--disable-log-requests")
    assert supports(row.name, "0.16.0")
    assert not supports(row.name, "0.17.0")
    assert not supports(row.name, "0.32.0")
    assert supports(row.name, "0.33.0")


def test_a_bound_is_said_as_a_bound() -> None:
    message = removed_flag_message("--num-scheduler-steps", "0.33.0")
    assert "was removed before vLLM 0.11" in message


def _boundaries(feature: versions.Feature) -> list[str]:
    return [v for v in (feature.since, feature.until, feature.back_in) if v is not None]


@pytest.mark.parametrize("name", ["cudagraph_in_budget", "default_utilization_0_92"])
def test_the_fit_rows_change_where_the_feature_does(name: str) -> None:
    """A fit row spans [since, next row's since); a feature it reads must not change inside."""
    starts = [Release.parse(r.since) for r in activation.PROFILES]
    for boundary in _boundaries(FEATURES[name]):
        b = Release.parse(boundary)
        if b.parts == (0, 0, 0):
            continue
        assert any(s.parts == b.parts or s.number == b.number for s in starts), (
            f"{name} changes at {boundary}, inside a row of activation.PROFILES"
        )
    for row in activation.PROFILES:
        assert row.cudagraph_in_budget == supports("cudagraph_in_budget", row.since)
        assert row.default_utilization == versions.default_utilization(row.since)
