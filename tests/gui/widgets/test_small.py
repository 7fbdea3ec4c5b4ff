"""The push button built in one call: name, tooltip, click handler, enabled and hidden states."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from kvpilot.gui.widgets.layouts import column_layout, row_layout
from kvpilot.gui.widgets.small import push_button


def test_a_button_carries_its_name_tooltip_and_calls_its_handler_on_each_click(qtbot) -> None:
    clicks: list[str] = []
    button = push_button("Copy", name="copyCommand", tooltip="Copy the command",
                         on_click=lambda: clicks.append("copy"))
    qtbot.addWidget(button)
    assert (button.text(), button.objectName(), button.toolTip()) == (
        "Copy", "copyCommand", "Copy the command")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert clicks == ["copy", "copy"]


def test_a_disabled_button_ignores_clicks_until_enabled(qtbot) -> None:
    clicks: list[int] = []
    button = push_button("Measure", on_click=lambda: clicks.append(1), enabled=False)
    qtbot.addWidget(button)
    assert button.objectName() == "" and button.toolTip() == ""
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert clicks == []
    button.setEnabled(True)
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert clicks == [1]


def test_a_hidden_button_stays_hidden_in_a_shown_panel_until_its_owner_shows_it(qtbot) -> None:
    panel = QWidget()
    qtbot.addWidget(panel)
    shown, hidden = push_button("Attach…"), push_button("Detach", hidden=True)
    column_layout(panel, row_layout(shown, hidden))
    panel.show()
    assert shown.isVisible() and not hidden.isVisible()
    hidden.setVisible(True)
    assert hidden.isVisible()
