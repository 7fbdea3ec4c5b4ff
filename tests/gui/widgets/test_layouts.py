"""Box layouts from the list of what they hold: order, stretch, margins and spacing."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QWidget

from kvpilot.gui.widgets.layouts import column_layout, row_layout


def test_a_column_holds_its_items_in_order_with_their_stretch(qtbot) -> None:
    panel = QWidget()
    qtbot.addWidget(panel)
    title, body, foot = QLabel("title"), QLabel("body"), QLabel("foot")
    top = row_layout((title, 1), QLabel("x"))
    lay = column_layout(panel, top, (body, 2), foot, margins_px=(6, 4, 6, 2), spacing_px=3)
    assert panel.layout() is lay
    assert lay.itemAt(0).layout() is top
    assert [lay.itemAt(i).widget() for i in (1, 2)] == [body, foot]
    assert [lay.stretch(i) for i in range(3)] == [0, 2, 0]
    assert top.stretch(0) == 1 and top.itemAt(0).widget() is title
    m = lay.contentsMargins()
    assert (m.left(), m.top(), m.right(), m.bottom()) == (6, 4, 6, 2)
    assert lay.spacing() == 3


def test_one_margin_stands_for_all_four_sides(qtbot) -> None:
    panel = QWidget()
    qtbot.addWidget(panel)
    lay = column_layout(panel, QLabel("only"), margins_px=2)
    m = lay.contentsMargins()
    assert (m.left(), m.top(), m.right(), m.bottom()) == (2, 2, 2, 2)
