"""Worker results, including those of tasks started by results, reach the GUI thread."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.gui.workers import run_in_pool

METRICS = DATA / "metrics"


def test_drain_delivers_results_of_tasks_started_by_results(qtbot) -> None:
    from kvpilot.gui.workers import drain

    seen: list[str] = []

    def first_done(value: str) -> None:
        seen.append(value)
        run_in_pool(lambda: "second", seen.append)

    run_in_pool(lambda: "first", first_done)
    assert drain(10_000)
    assert seen == ["first", "second"]
