"""The server panel's log view: bounded, filtered by level."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.gui.panels.server_panel import LogView

METRICS = DATA / "metrics"


def test_log_view_is_bounded_and_filters(qtbot) -> None:
    view = LogView(max_lines=100)
    qtbot.addWidget(view)
    for i in range(250):
        view.append("WARNING" if i % 10 == 0 else "INFO", f"line {i}")
    assert view.line_count() == 100
    assert view.text.document().blockCount() <= 100
    view.level.setCurrentIndex(2)
    shown = view.visible_text().splitlines()
    assert shown == [f"line {i}" for i in range(150, 250, 10)]
    view.level.setCurrentIndex(0)
    view.search.setText("line 24")
    assert view.visible_text().splitlines() == [f"line {i}" for i in range(240, 250)]
