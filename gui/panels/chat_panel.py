"""The Chat tab: talk to the served or attached model, reply by reply with its figures.

The panel shows what :class:`~kvpilot.gui.controllers.chat.ChatController` gives it (the
conversation, the reply streaming in, the server it talks to) and emits what the user asks
(send, stop, clear, attach an image); it computes nothing. The conversation is one read-only
text view that wraps long words anywhere, so that no message can widen the window.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextOption
from PySide6.QtWidgets import (
    QDoubleSpinBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.conversation import (
    MAX_MAX_TOKENS,
    MAX_TEMPERATURE,
    ROLE_USER,
    ChatMessage,
    ChatSettings,
    ReplyStats,
    stats_text,
)
from kvpilot.gui import theme
from kvpilot.gui.screen_fit import wrap_anywhere
from kvpilot.gui.widgets.layouts import column_layout, row_layout
from kvpilot.gui.widgets.small import push_button

#: the input box's height in text lines
INPUT_LINES = 3
#: a user message longer than this (characters) is shown cut, with its length (all is sent)
SHOWN_CHARS = 1500


def stats_line(stats: ReplyStats) -> str:
    """The figures under a reply (the core's one line, the same ``kvpilot chat`` prints)."""
    return stats_text(stats)


def _text_html(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def message_html(message: ChatMessage, *, streaming: bool = False) -> str:
    """One message as HTML: who, the text, and a reply's figures or its error sentence."""
    if message.role == ROLE_USER:
        who = f"<b style='color:{theme.INFO}'>You</b>"
    else:
        who = f"<b style='color:{theme.OK}'>Model</b>"
    text = message.text
    body = ""
    if message.role == ROLE_USER and len(text) > SHOWN_CHARS:
        body = _text_html(text[:SHOWN_CHARS]) + (
            f"<i style='color:{theme.MUTED}'> … ({len(text):,} characters, all of them sent)</i>"
        )
    elif text:
        body = _text_html(text)
    if message.image_url:
        body += f"<br><i style='color:{theme.MUTED}'>[image attached]</i>"
    if streaming:
        body += f" <span style='color:{theme.MUTED}'>▍</span>"
    if message.error:
        body += f"<br><span style='color:{theme.FAIL}'>{_text_html(message.error)}</span>"
    if body:
        body = "<br>" + body.removeprefix("<br>")
    extra = ""
    if message.stats is not None and not message.error:
        extra = (
            f"<div style='color:{theme.MUTED}; font-size:small'>"
            f"{html.escape(stats_line(message.stats))}</div>"
        )
    return f"<p>{who}{body}</p>{extra}"


class _InputBox(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        super().keyPressEvent(event)


class ChatPanel(QWidget):
    """System prompt, temperature, max tokens; the conversation; the message box with Send,
    Stop and (for vision models) an image."""

    send_requested = Signal()
    stop_requested = Signal()
    clear_requested = Signal()
    attach_image_requested = Signal()
    remove_image_requested = Signal()
    settings_changed = Signal()
    #: a reply started (True) or ended (False)
    busy_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatPanel")

        self.target = QLabel("no server: launch one or attach to a running one")
        self.target.setObjectName("chatTarget")
        self.target.setWordWrap(True)
        self.clear_button = push_button("Clear conversation", name="chatClear",
                                        on_click=self.clear_requested.emit)

        self.system_prompt = QLineEdit()
        self.system_prompt.setObjectName("chatSystemPrompt")
        self.system_prompt.setPlaceholderText("system prompt (none)")
        self.temperature = QDoubleSpinBox()
        self.temperature.setObjectName("chatTemperature")
        self.temperature.setRange(0.0, MAX_TEMPERATURE)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setToolTip("Sampling temperature (0 = always the likeliest token)")
        self.max_tokens = QSpinBox()
        self.max_tokens.setObjectName("chatMaxTokens")
        self.max_tokens.setRange(1, MAX_MAX_TOKENS)
        self.max_tokens.setGroupSeparatorShown(True)
        self.max_tokens.setToolTip("The most tokens one reply may have")

        self.view = QTextBrowser()
        self.view.setObjectName("chatView")
        self.view.setOpenLinks(False)
        self.view.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)

        self.input = _InputBox()
        self.input.setObjectName("chatInput")
        self.input.setPlaceholderText("Message (Enter sends, Shift+Enter: new line)")
        self.input.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        line = self.input.fontMetrics().lineSpacing()
        self.input.setFixedHeight(line * INPUT_LINES + 12)
        self.send_button = push_button("Send", name="chatSend", on_click=self.send_requested.emit)
        self.stop_button = push_button("Stop", name="chatStop", on_click=self.stop_requested.emit,
                                       enabled=False)
        self.image_button = push_button(
            "Image…", name="chatImage", tooltip="Send an image with the message (vision models)",
            on_click=self.attach_image_requested.emit, hidden=True,
        )
        self.image_label = QLabel()
        self.image_label.setObjectName("chatImageName")
        self.image_remove = push_button("✕", name="chatImageRemove",
                                        tooltip="Do not send the image",
                                        on_click=self.remove_image_requested.emit, hidden=True)
        self.image_label.setVisible(False)

        top = QHBoxLayout()
        top.addWidget(self.target, 1)
        top.addWidget(self.clear_button)
        options = QHBoxLayout()
        options.addWidget(QLabel("System:"))
        options.addWidget(self.system_prompt, 1)
        options.addWidget(QLabel("Temperature:"))
        options.addWidget(self.temperature)
        options.addWidget(QLabel("Max tokens:"))
        options.addWidget(self.max_tokens)
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.image_button)
        buttons.addStretch(1)
        entry = row_layout((self.input, 1), buttons)
        image_row = row_layout((self.image_label, 1), self.image_remove)
        column_layout(self, top, options, (self.view, 1), image_row, entry, margins_px=4,
                      spacing_px=4)

        self.input.submitted.connect(self.send_requested)
        self.system_prompt.editingFinished.connect(self.settings_changed)
        self.temperature.editingFinished.connect(self.settings_changed)
        self.max_tokens.editingFinished.connect(self.settings_changed)
        self.set_settings(ChatSettings())

    # ------------------------------------------------------------------ shown state

    def show_target(self, text: str, *, ready: bool, takes_images: bool) -> None:
        """Whom the chat talks to (or why it cannot); Send only when ``ready``; the image
        button only for a model that takes images."""
        self.target.setText(wrap_anywhere(text))
        self._ready = ready
        self.image_button.setVisible(takes_images)
        if not takes_images:
            self.show_image(None)
        self._update_buttons()

    def show_messages(
        self, messages: Sequence[ChatMessage], streaming: ChatMessage | None = None
    ) -> None:
        """Render the conversation (and the reply arriving), scrolled to its end."""
        parts = [message_html(m) for m in messages]
        if not parts and streaming is None:
            parts.append(
                f"<p style='color:{theme.MUTED}'>No messages yet. Each reply shows its time to "
                "first token, its tokens per second and its token counts.</p>"
            )
        self.view.setHtml("".join(parts))
        self._tail_start: int | None = None
        if streaming is not None:
            end = QTextCursor(self.view.document())
            end.movePosition(QTextCursor.MoveOperation.End)
            self._tail_start = end.position()
            self.show_streaming(streaming)
        self._scroll_to_end()

    def show_streaming(self, streaming: ChatMessage) -> None:
        """Redraw only the reply arriving, after the conversation :meth:`show_messages` drew
        with it (the cost does not grow with the conversation); a full redraw when there is
        none."""
        start = getattr(self, "_tail_start", None)
        if start is None:
            self.show_messages((), streaming)
            return
        bar = self.view.verticalScrollBar()
        following = bar.value() >= bar.maximum() - 8  # a reader who scrolled up stays put
        cursor = QTextCursor(self.view.document())
        cursor.setPosition(start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertHtml(message_html(streaming, streaming=True))
        if following:
            self._scroll_to_end()

    def _scroll_to_end(self) -> None:
        bar = self.view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def set_busy(self, busy: bool) -> None:
        """A reply is streaming: Stop instead of Send."""
        changed = busy != getattr(self, "_busy", False)
        self._busy = busy
        self._update_buttons()
        if changed:
            self.busy_changed.emit(busy)

    def show_image(self, name: str | None) -> None:
        """The image that goes with the next message (None: none)."""
        self.image_label.setText(wrap_anywhere(f"image: {name}") if name else "")
        self.image_label.setVisible(bool(name))
        self.image_remove.setVisible(bool(name))

    def _update_buttons(self) -> None:
        busy = getattr(self, "_busy", False)
        ready = getattr(self, "_ready", False)
        self.send_button.setEnabled(ready and not busy)
        self.stop_button.setEnabled(busy)

    # ------------------------------------------------------------------ inputs

    def settings(self) -> ChatSettings:
        """The chat settings as entered."""
        return ChatSettings(
            system_prompt=self.system_prompt.text(),
            temperature=round(self.temperature.value(), 2),
            max_tokens=self.max_tokens.value(),
        )

    def set_settings(self, settings: ChatSettings) -> None:
        """Show ``settings`` (a profile's, when its conversation is loaded)."""
        s = settings.checked()
        self.system_prompt.setText(s.system_prompt)
        self.temperature.setValue(s.temperature)
        self.max_tokens.setValue(s.max_tokens)

    def take_input(self) -> str:
        """The message typed (stripped), and the box emptied; "" when nothing was typed (the
        box is kept)."""
        text = self.input.toPlainText().strip()
        if text:
            self.input.clear()
        return text
