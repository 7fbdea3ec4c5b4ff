"""The Chat tab: one streamed reply at a time from the served or attached server.

The server is this window's once it is ready, else the watched one (the same choice as the load
test). The API key is the launching profile's (read from the keyring by the settings store) or
the one given when attaching; it goes only to the core client. Each reply runs on a thread of
its own (:func:`~kvpilot.gui.workers.run_in_thread`); its pieces arrive through a queued
signal and are drawn at most every :data:`REDRAW_MS`. A failure is one sentence in place of the
reply; nothing opens a dialog. The conversation of the active profile is read and written on the
pool (:class:`~kvpilot.core.chat.store.ConversationStore`), the newest one always last.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer, Signal

from kvpilot.core.base.conversation import ROLE_ASSISTANT, ROLE_USER, ChatMessage, Conversation
from kvpilot.gui.controllers import Controller
from kvpilot.gui.workers import run_in_thread

if TYPE_CHECKING:
    from kvpilot.core.chat.client import ChatCall, ChatTarget, Reply
    from kvpilot.core.chat.store import ConversationStore, Loaded
    from kvpilot.gui.controllers.attach import AttachController
    from kvpilot.gui.controllers.server import ServerController
    from kvpilot.gui.panels.chat_panel import ChatPanel
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

log = logging.getLogger("kvpilot.gui")

#: the longest wait between two redraws of a streaming reply (ms)
REDRAW_MS = 80


class _Pieces(QObject):
    """Carries a reply's pieces from its thread to the GUI thread: (call number, text)."""

    piece = Signal(int, str)


class ChatController(Controller):
    """Owns the active profile's conversation, the reply in progress and the chat target."""

    def __init__(
        self,
        window: WindowWidgets,
        panel: ChatPanel,
        server: ServerController,
        attach: AttachController,
        store: ConversationStore | None = None,
    ) -> None:
        super().__init__(window)
        from kvpilot.core.chat.store import ConversationStore

        self.panel = panel
        self.server = server
        self.attach = attach
        self.store = store or ConversationStore()
        self.profile_name: str | None = None
        self.conversation = Conversation()
        self.loaded = False
        self.call: ChatCall | None = None
        self.streaming = ""
        self.image_url: str | None = None
        self.target: ChatTarget | None = None
        self._model_ref = ""
        self._vision: dict[str, bool] = {}
        self._calls = 0
        self._pieces = _Pieces()
        self._pieces.piece.connect(self._on_piece)
        self._redraw = QTimer(panel)
        self._redraw.setSingleShot(True)
        self._redraw.setInterval(REDRAW_MS)
        self._redraw.timeout.connect(self._draw)
        self._save_lock = threading.Lock()
        self._revision = 0
        self._written = 0

    def wire(self) -> None:
        """Connect the panel's signals, the tab switch, the profile choice and the server's
        state changes."""
        p = self.panel
        p.send_requested.connect(lambda: self.send())
        p.stop_requested.connect(self.stop)
        p.clear_requested.connect(self.clear)
        p.attach_image_requested.connect(lambda: self.attach_image())
        p.remove_image_requested.connect(self._remove_image)
        p.settings_changed.connect(self._on_settings_changed)
        self.window.tabs.currentChanged.connect(lambda _i: self._on_tab())
        self.window.profile_combo.activated.connect(lambda _i: self.refresh())
        self.services.bridge.server_event.connect(self._on_server_event)

    # ================================================================ target & profile

    def _on_tab(self) -> None:
        if self.window.tabs.currentWidget() is self.panel:
            self.refresh()

    def _on_server_event(self, ev: object) -> None:
        from kvpilot.core.app.server_events import server_news

        if server_news(ev).state is not None:  # whom the chat talks to may have changed
            self.refresh()

    def refresh(self) -> None:
        """Load the active profile's conversation if another one is shown, and show whom the
        chat talks to now."""
        name = self.window.profile.name
        if name != self.profile_name:
            self._load(name)
        self._update_target()

    def _update_target(self) -> None:
        from kvpilot.core.chat.client import ChatTarget

        attached = self.attach.attached
        if attached is not None:
            base_url, model, key = attached.base_url, attached.model_id or "", self.attach.api_key
            ref, whose = attached.model_root or model, "watched server"
        else:
            serving = self.server.serving()
            sup = self.services.supervisor
            if serving is None or sup is None:
                self.target = None
                self.panel.show_target(
                    "No server to talk to: launch a plan or attach to a running server.",
                    ready=False, takes_images=False,
                )
                return
            base_url, model, key = serving
            ref, whose = str(getattr(sup.spec, "model", "") or model), "this window's server"
        takes_images = self._vision.get(ref, False)
        self.target = ChatTarget(base_url, model, key, takes_images)
        images = " · takes images" if takes_images else ""
        self.panel.show_target(
            f"Talking to {model} at {base_url}/v1 ({whose}){images}",
            ready=self.loaded, takes_images=takes_images,
        )
        if ref and ref not in self._vision and ref != self._model_ref:
            self._model_ref = ref
            self.in_pool(lambda: _takes_images(ref), lambda yes: self._on_vision(ref, yes))

    def _on_vision(self, ref: str, yes: bool) -> None:
        self._vision[ref] = yes
        self._update_target()

    def _load(self, name: str) -> None:
        if self.call is not None:
            self.stop()
        self._calls += 1  # the reply of the previous profile's conversation is dropped
        self.call = None
        self.streaming = ""
        self.profile_name = name
        self.loaded = False
        self.conversation = Conversation()
        self.panel.set_busy(False)
        self.panel.show_messages(())
        self.in_pool(lambda: self.store.load(name), lambda got: self._on_loaded(name, got))

    def _on_loaded(self, name: str, got: Loaded) -> None:
        if name != self.profile_name:
            return  # another profile was chosen meanwhile
        self.conversation = got.conversation
        self.loaded = True
        self.panel.set_settings(got.conversation.settings)
        self.panel.show_messages(self.conversation.messages)
        if got.warning:
            self.say(got.warning, 15_000)
        self._update_target()

    # ================================================================ a reply

    def send(self, text: str | None = None) -> bool:
        """Send the typed message (or ``text``) and stream the reply into the conversation.

        False when nothing was sent: a reply is still streaming, there is no server, the
        conversation is not loaded yet, or the message is empty.
        """
        from kvpilot.core.chat.client import ChatCall

        if self.call is not None:
            return False
        self.refresh()
        if self.target is None or not self.loaded:
            return False
        message = text.strip() if text is not None else self.panel.take_input()
        if not message and self.image_url is None:
            return False
        settings = self.panel.settings()
        user = ChatMessage(ROLE_USER, message, image_url=self.image_url)
        self.conversation = replace(self.conversation, settings=settings).add(user)
        self._remove_image()
        call = self.call = ChatCall(self.target, settings, self.conversation.messages)
        self._calls += 1
        number = self._calls
        self.streaming = ""
        self.panel.set_busy(True)
        self._draw()
        pieces = self._pieces.piece
        run_in_thread(
            lambda: call.run(lambda piece: pieces.emit(number, piece)),
            lambda reply: self._on_reply(number, reply),
            lambda exc: self._on_failure(number, exc),
            name="kvpilot-chat",
        )
        return True

    def stop(self) -> None:
        """Stop the reply in progress (what arrived is kept, marked stopped)."""
        if self.call is not None:
            self.call.stop()

    def _on_piece(self, number: int, piece: str) -> None:
        if number == self._calls and self.call is not None:
            self.streaming += piece
            if not self._redraw.isActive():
                self._redraw.start()

    def _draw(self) -> None:
        """The conversation with the reply arriving (the whole of it when the reply starts;
        then only the reply: :meth:`ChatPanel.show_streaming`)."""
        if self.call is None:
            self.panel.show_messages(self.conversation.messages)
        elif not self.streaming:
            self.panel.show_messages(self.conversation.messages, ChatMessage(ROLE_ASSISTANT, ""))
        else:
            self.panel.show_streaming(ChatMessage(ROLE_ASSISTANT, self.streaming))

    def _on_reply(self, number: int, reply: Reply) -> None:
        if number != self._calls:
            return
        self._finish(reply.message())

    def _on_failure(self, number: int, exc: BaseException) -> None:
        from kvpilot.core.chat.errors import ChatError

        if number != self._calls:
            return
        if isinstance(exc, ChatError):
            sentence = str(exc)
            log.info("chat reply failed (%s): %s", exc.kind, exc.detail or sentence)
        else:
            sentence = f"The reply failed: {exc}."
            log.error("chat reply failed", exc_info=exc)
        self._finish(ChatMessage(ROLE_ASSISTANT, self.streaming, error=sentence))

    def _finish(self, message: ChatMessage) -> None:
        self.call = None
        self.streaming = ""
        self._redraw.stop()
        self.conversation = self.conversation.add(message)
        self.panel.set_busy(False)
        self.panel.show_messages(self.conversation.messages)
        self._save()

    # ================================================================ conversation

    def clear(self) -> None:
        """Forget the active profile's messages (on screen and on disk); the settings stay."""
        self.stop()
        self._calls += 1  # a reply still arriving is dropped
        self.call = None
        self.streaming = ""
        self.panel.set_busy(False)
        self.conversation = replace(self.conversation.cleared(), settings=self.panel.settings())
        self.panel.show_messages(())
        self._save()

    def _on_settings_changed(self) -> None:
        if self.loaded and self.panel.settings() != self.conversation.settings:
            self.conversation = replace(self.conversation, settings=self.panel.settings())
            self._save()

    def _save(self) -> None:
        """Write the conversation on the pool; a write never replaces a newer one."""
        name, conv = self.profile_name, self.conversation
        if name is None:
            return
        self._revision += 1
        revision = self._revision

        self.in_pool(
            lambda: self._write(revision, name, conv),
            lambda _none: None,
            lambda exc: self.say(str(exc), 15_000),
        )

    def _write(self, revision: int, name: str, conv: Conversation) -> None:
        """Write ``conv`` unless a newer revision is already on disk (any thread).

        Raises:
            ChatStoreError: the file cannot be written.
        """
        with self._save_lock:
            if revision < self._written:
                return
            if conv.messages:
                self.store.save(name, conv)
            else:
                self.store.clear(name, conv.settings)
            self._written = revision

    # ================================================================ images

    def attach_image(self, path: Path | None = None) -> None:
        """Send an image with the next message (a file dialog asks when ``path`` is None)."""
        from kvpilot.core.chat.images import image_data_url

        if path is None:
            from PySide6.QtWidgets import QFileDialog

            chosen, _filter = QFileDialog.getOpenFileName(
                self.window, "Image to send", "", "Images (*.png *.jpg *.jpeg *.gif *.bmp *.webp)"
            )
            if not chosen:
                return
            path = Path(chosen)
        picked = path
        self.in_pool(
            lambda: image_data_url(picked),
            lambda url: self._on_image(picked.name, url),
            lambda exc: self.say(str(exc), 10_000),
        )

    def _on_image(self, name: str, url: str) -> None:
        self.image_url = url
        self.panel.show_image(name)

    def _remove_image(self) -> None:
        self.image_url = None
        self.panel.show_image(None)

    def shutdown(self) -> None:
        """Stop a reply in progress and write the conversation now (the window closes)."""
        from kvpilot.core.chat.store import ChatStoreError

        self.stop()
        if self.profile_name is not None and self.loaded:
            conv = replace(self.conversation, settings=self.panel.settings())
            self._revision += 1
            try:
                self._write(self._revision, self.profile_name, conv)
            except ChatStoreError as exc:
                self.say(str(exc))


def _takes_images(ref: str) -> bool:
    from kvpilot.core.chat.images import model_takes_images

    return model_takes_images(ref)
