"""The start-up phase names: one table, in start order, that the log scanner reports from."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.core.vllm import logparse, phases


def test_the_scanner_reports_phases_of_the_table_in_its_order() -> None:
    scanner = logparse.LogScanner()
    seen = []
    for line in (DATA / "vllm_logs" / "cpu_0.32" / "startup.log").read_text().splitlines():
        seen += [e.phase for e in scanner.feed(line) if isinstance(e, logparse.PhaseEvent)]
    assert seen == [phases.RESOLVING, phases.LOADING_WEIGHTS, phases.KV_CACHE_ALLOCATED,
                    phases.STARTING_API]
    assert seen == sorted(seen, key=phases.PHASES.index)
    assert logparse.PHASES is phases.PHASES  # re-exported, not a second table
