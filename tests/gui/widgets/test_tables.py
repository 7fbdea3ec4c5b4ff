"""The read-only table: labels, no editing, row selection and the stretched column."""

from __future__ import annotations

from PySide6.QtWidgets import QAbstractItemView, QHeaderView

from kvpilot.gui.widgets.tables import SELECT_MANY, read_only_table


def test_a_list_table_selects_rows_and_stretches_the_column_asked(qtbot) -> None:
    table = read_only_table("runsList", ["when", "model", "tokens/s"], select=SELECT_MANY,
                            stretch=1)
    qtbot.addWidget(table)
    assert table.objectName() == "runsList"
    labels = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    assert labels == ["when", "model", "tokens/s"]
    assert table.editTriggers() == QAbstractItemView.EditTrigger.NoEditTriggers
    assert table.selectionBehavior() == QAbstractItemView.SelectionBehavior.SelectRows
    assert table.selectionMode() == SELECT_MANY
    assert not table.verticalHeader().isVisibleTo(table)
    header = table.horizontalHeader()
    modes = [header.sectionResizeMode(c) for c in range(3)]
    assert modes == [QHeaderView.ResizeMode.ResizeToContents, QHeaderView.ResizeMode.Stretch,
                     QHeaderView.ResizeMode.ResizeToContents]


def test_the_last_column_stretches_with_minus_one_and_cells_select_by_default(qtbot) -> None:
    table = read_only_table("budgetDetail", ["term", "GiB", "note"], stretch=-1,
                            row_numbers=True)
    qtbot.addWidget(table)
    assert table.horizontalHeader().sectionResizeMode(2) == QHeaderView.ResizeMode.Stretch
    assert table.selectionBehavior() == QAbstractItemView.SelectionBehavior.SelectItems
    assert table.verticalHeader().isVisibleTo(table)
