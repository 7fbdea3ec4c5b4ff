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


def test_a_result_for_a_deleted_widget_is_dropped(qtbot) -> None:
    """A dialog closed and deleted while its job ran (the settings dialog's vLLM listing after
    OK) gets no callback on a deleted C++ object."""
    import threading

    from PySide6.QtWidgets import QLabel
    from shiboken6 import Shiboken

    from kvpilot.gui.workers import drain

    label = QLabel()
    release = threading.Event()
    seen: list[str] = []
    run_in_pool(lambda: release.wait(10) and "found", lambda r: seen.append(label.setText(r) or r),
                owner=label)
    Shiboken.delete(label)
    release.set()
    assert drain(10_000)
    assert seen == []
    kept = QLabel()
    qtbot.addWidget(kept)
    run_in_pool(lambda: "found", kept.setText, owner=kept)
    assert drain(10_000)
    assert kept.text() == "found"
