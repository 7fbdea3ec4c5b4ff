"""FirstPaint: a callback once a window, or one widget of it, is painted (when a condition
holds)."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from kvpilot.gui.first_paint import FirstPaint


def _window() -> tuple[QWidget, QLabel, QLabel]:
    window = QWidget()
    layout = QVBoxLayout(window)
    first, second = QLabel("first"), QLabel("second")
    layout.addWidget(first)
    layout.addWidget(second)
    window.resize(300, 200)
    return window, first, second


def test_the_first_paint_of_any_part_of_the_window_is_reported_once(qtbot) -> None:
    window, first, _ = _window()
    qtbot.addWidget(window)
    calls: list[str] = []
    watcher = FirstPaint(window, lambda: calls.append("shown"))
    window.show()
    qtbot.waitUntil(lambda: calls == ["shown"], timeout=5000)
    assert not watcher.pending
    first.repaint()
    qtbot.wait(50)
    assert calls == ["shown"]


def test_only_one_widget_and_only_once_the_condition_holds(qtbot) -> None:
    window, first, second = _window()
    qtbot.addWidget(window)
    ready = False
    calls: list[str] = []
    watcher = FirstPaint(window, lambda: calls.append("ranked"), only=second,
                         when=lambda: ready)
    window.show()
    qtbot.waitExposed(window)
    second.repaint()  # painted, but not ready yet
    first.repaint()
    qtbot.wait(50)
    assert calls == [] and watcher.pending
    ready = True
    first.repaint()  # ready, but another widget
    qtbot.wait(50)
    assert calls == [] and watcher.pending
    second.repaint()
    qtbot.waitUntil(lambda: calls == ["ranked"], timeout=5000)
    assert not watcher.pending
