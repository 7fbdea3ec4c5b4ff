"""The server panel's log view: bounded, filtered by level."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtGui import QGuiApplication
from testpaths import DATA

from kvpilot.gui import theme
from kvpilot.gui.panels.server_panel import ROW_CHARS, LogView

METRICS = DATA / "metrics"


def test_log_view_is_bounded_and_filters(qtbot) -> None:
    view = LogView(max_lines=100)
    qtbot.addWidget(view)
    for i in range(250):
        view.append("WARNING" if i % 10 == 0 else "INFO", f"line {i}")
    assert view.line_count() == 100
    assert view.shown_count() == 100
    view.level.setCurrentIndex(2)
    shown = view.visible_text().splitlines()
    assert shown == [f"line {i}" for i in range(150, 250, 10)]
    view.level.setCurrentIndex(0)
    view.search.setText("line 24")
    assert view.visible_text().splitlines() == [f"line {i}" for i in range(240, 250)]


def test_log_view_keeps_bounded_rows_while_it_follows_the_tail(qtbot) -> None:
    view = LogView(max_lines=50)
    qtbot.addWidget(view)
    view.resize(600, 300)
    view.show()
    qtbot.waitExposed(view)
    view.append_many([("INFO", f"batch line {i}") for i in range(120)])  # one batch > bound
    view.append_many([("INFO", f"tail {i}") for i in range(30)])
    lines = view.visible_text().splitlines()
    assert lines == [f"batch line {i}" for i in range(100, 120)] + [f"tail {i}" for i in range(30)]
    assert view.model.rowCount() == 50
    last = view.model.index(49, 0)
    assert view.rows.visualRect(last).bottom() <= view.rows.viewport().height()  # in sight
    view.follow.setChecked(False)
    view.rows.scrollToTop()
    view.append_many([("INFO", "not followed")])
    assert view.rows.indexAt(view.rows.viewport().rect().topLeft()).row() == 0


def test_log_view_long_line_drawn_cut_copied_whole(qtbot) -> None:
    view = LogView(max_lines=10)
    qtbot.addWidget(view)
    long_line = "x" * (ROW_CHARS * 3)
    view.append_many([("INFO", "short"), ("ERROR", long_line), ("INFO", "after")])
    model = view.model
    shown = model.data(model.index(1, 0), Qt.ItemDataRole.DisplayRole)
    assert isinstance(shown, str) and len(shown) < ROW_CHARS + 5 and shown.endswith("…")
    tip = model.data(model.index(1, 0), Qt.ItemDataRole.ToolTipRole)
    assert isinstance(tip, str) and tip.startswith("x" * 100)
    assert model.data(model.index(0, 0), Qt.ItemDataRole.ToolTipRole) is None  # short: no tip
    assert model.data(model.index(0, 0), Qt.ItemDataRole.ForegroundRole) is None  # INFO: plain
    error_color = model.data(model.index(1, 0), Qt.ItemDataRole.ForegroundRole)
    assert error_color.name() == theme.FAIL
    assert model.data(model.index(7, 0), Qt.ItemDataRole.DisplayRole) is None  # no such row
    selection = view.rows.selectionModel()
    for row in (2, 1):  # selected out of order: copied in log order
        selection.select(model.index(row, 0), QItemSelectionModel.SelectionFlag.Select)
    view.copy_selection()
    assert QGuiApplication.clipboard().text() == long_line + "\nafter"
    copy_all = next(a for a in view.rows.actions() if a.text().startswith("Copy all"))
    copy_all.trigger()
    assert QGuiApplication.clipboard().text() == "\n".join(["short", long_line, "after"])
    view.clear()
    assert view.model.rowCount() == 0 and view.line_count() == 0
