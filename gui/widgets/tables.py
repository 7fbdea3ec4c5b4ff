"""The read-only table every panel and dialog lists its rows in."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget

#: whole-row selection modes a list table offers
SELECT_ONE = QAbstractItemView.SelectionMode.SingleSelection
SELECT_MANY = QAbstractItemView.SelectionMode.ExtendedSelection


def read_only_table(
    name: str,
    columns: Sequence[str],
    *,
    select: QAbstractItemView.SelectionMode | None = None,
    stretch: int | None = None,
    row_numbers: bool = False,
) -> QTableWidget:
    """An empty table the user reads but does not edit, object name ``name``, one column per
    label of ``columns``.

    Columns are as wide as their contents, except column ``stretch`` (an index; -1 the last),
    which takes the width left. ``select`` (:data:`SELECT_ONE` or :data:`SELECT_MANY`) selects
    whole rows; None leaves Qt's cell selection. Row numbers show only with ``row_numbers``.
    """
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(list(columns))
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(row_numbers)
    if select is not None:
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(select)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    if stretch is not None:
        header.setSectionResizeMode(stretch % len(columns), QHeaderView.ResizeMode.Stretch)
    return table
