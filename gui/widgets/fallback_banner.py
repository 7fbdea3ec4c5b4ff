"""The failure banner: the cause in one sentence and the ranked fallbacks as buttons.

The main window fills it from the supervisor's failure and the launch session's ranked
fallbacks (:class:`kvpilot.core.app.launch.FallbackChoice`); one click on one relaunches with it.

Signals:
    option_chosen(object): the clicked :class:`~kvpilot.core.app.launch.FallbackChoice`.
    details_requested(): the user wants the log.
    dismissed(): the banner was closed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QWidget,
)

from kvpilot.gui import theme
from kvpilot.gui.screen_fit import elide_middle, wrap_anywhere
from kvpilot.gui.widgets.flow_layout import FlowLayout
from kvpilot.gui.widgets.layouts import column_layout
from kvpilot.gui.widgets.small import push_button, wrapped_label

if TYPE_CHECKING:
    from kvpilot.core.app.launch import FallbackChoice

#: longest option label shown in full, in characters (about 1,000 px, well inside a 1,366 px
#: screen); a longer one is elided in the middle and kept whole in the tooltip; shorter ones wrap
#: onto rows as whole buttons
OPTION_LABEL_CHARS = 150
#: the keys that press the first nine option buttons: Alt+1 is the best fallback
OPTION_SHORTCUTS = tuple(f"Alt+{n}" for n in range(1, 10))


class FallbackBanner(QFrame):
    """A red-edged banner shown instead of the server row until dismissed."""

    option_chosen = Signal(object)
    details_requested = Signal()
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("fallbackBanner")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(
            f"#fallbackBanner {{ border: 2px solid {theme.FAIL}; border-radius: 4px; "
            "background: #fff4f4; }"
            "#fallbackBanner QLabel { color: #202020; }"
        )
        self.cause = QLabel()
        self.cause.setObjectName("fallbackCause")
        self.cause.setWordWrap(True)
        self.cause.setTextFormat(Qt.TextFormat.RichText)
        self.cause.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setToolTip("Dismiss")
        self.close_button.clicked.connect(self._dismiss)
        top = QHBoxLayout()
        top.addWidget(self.cause, 1)
        top.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        # a flow, not a row or a fixed grid: the buttons wrap onto as many rows as the window's
        # width leaves, so long option labels never widen the window past the screen
        self.buttons_row = FlowLayout(h_spacing_px=6, v_spacing_px=4)
        self.note = wrapped_label()
        self.note.setVisible(False)
        column_layout(self, top, self.buttons_row, self.note, margins_px=(8, 6, 8, 6))
        self.option_buttons: list[QPushButton] = []
        self.setVisible(False)

    def show_failure(
        self, cause: str, choices: Sequence[FallbackChoice], *, note: str = ""
    ) -> None:
        """Show ``cause`` and one button per choice (best first), plus Details."""
        self.cause.setText(
            f'<span style="color:{theme.FAIL}; font-weight:600">✗ vLLM could not start:</span> '
            f"{_escape(wrap_anywhere(cause))}"
        )
        self._clear_buttons()
        for i, choice in enumerate(choices):
            b = QPushButton(elide_middle(choice.label, OPTION_LABEL_CHARS))
            b.setObjectName(f"fallbackOption{i}")
            b.setAccessibleName(choice.label)
            tip = choice.tooltip
            if b.text() != choice.label and choice.label not in tip:
                tip = f"{choice.label}\n{tip}" if tip else choice.label
            if i < len(OPTION_SHORTCUTS):
                b.setShortcut(QKeySequence(OPTION_SHORTCUTS[i]))
                tip = f"{tip} ({OPTION_SHORTCUTS[i]})" if tip else OPTION_SHORTCUTS[i]
            b.setToolTip(tip)
            if i == 0:
                b.setDefault(True)
                b.setStyleSheet("font-weight: 600")
            b.clicked.connect(lambda _=False, c=choice: self._choose(c))
            self.buttons_row.addWidget(b)
            self.option_buttons.append(b)
        details = push_button("Details (log)", name="fallbackDetails",
                              on_click=self.details_requested.emit)
        self.buttons_row.addWidget(details)
        self._details = details
        self.note.setText(note)
        self.note.setVisible(bool(note))
        self.setVisible(True)

    def set_title(self, title: str) -> None:
        """Replace the lead-in (e.g. "the server stopped:" after a crash while serving)."""
        text = self.cause.text().replace("vLLM could not start:", title, 1)
        self.cause.setText(text)

    def _choose(self, choice: FallbackChoice) -> None:
        for b in self.option_buttons:
            b.setEnabled(False)
        self.option_chosen.emit(choice)

    def _clear_buttons(self) -> None:
        while self.buttons_row.count():
            item = self.buttons_row.takeAt(0)
            w = item.widget() if item is not None else None
            if w is not None:
                w.setParent(None)
                w.deleteLater()
        self.option_buttons = []

    def _dismiss(self) -> None:
        self.setVisible(False)
        self.dismissed.emit()


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
