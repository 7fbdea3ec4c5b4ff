"""The Chat tab against the real vLLM CPU engine (marked e2e): attach to a server that wants
an API key, stream replies with their figures, stop one, meet the context limit and a stopped
server, each failure one sentence in the conversation and no dialog; clear the conversation.

With ``KVPILOT_SCREENSHOTS=<dir>`` the window (1,366 x 768, the Chat tab in front) is saved as
``chat.png`` there for the documentation.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.conftest import READY_TIMEOUT_S

from kvpilot.core.chat.store import ConversationStore
from kvpilot.core.vllm.supervisor import Supervisor
from kvpilot.gui.screen_fit import ZWSP

pytestmark = pytest.mark.e2e

API_KEY = "chat-gui-key-7"
REPLY_MS = 180_000


@pytest.fixture(scope="module")
def keyed_server(vllm_runtime, launch_spec, tmp_path_factory) -> Iterator[Supervisor]:
    """One real vLLM server of the tiny model for this module; it wants ``API_KEY``."""
    sup = Supervisor(
        vllm_runtime, launch_spec(api_key=API_KEY, served_model_name="tiny-chat"),
        data_dir=tmp_path_factory.mktemp("chat-gui"),
    )
    sup.start()
    try:
        if not sup.wait_ready(READY_TIMEOUT_S):
            tail = "\n".join(sup.lines()[-40:])
            pytest.fail(f"vLLM did not become ready ({sup.state}):\n{tail}")
        yield sup
    finally:
        assert sup.stop().clean


def _reply(qtbot, window, text: str) -> None:
    """Type ``text``, press Send and wait until the reply ended."""
    panel = window.chat_panel
    panel.input.setPlainText(text)
    with qtbot.waitSignal(panel.busy_changed, timeout=REPLY_MS,
                          check_params_cb=lambda busy: not busy):
        panel.send_button.click()


def _no_dialog(qtbot) -> None:
    from PySide6.QtWidgets import QApplication, QDialog, QMessageBox

    qtbot.wait(50)
    shown = [w for w in QApplication.topLevelWidgets()
             if isinstance(w, (QDialog, QMessageBox)) and w.isVisible()]
    assert shown == [] and QApplication.activeModalWidget() is None


def test_the_chat_tab_talks_to_the_attached_server(
    make_window, qtbot, keyed_server: Supervisor, vllm_runtime, tmp_path: Path
) -> None:
    w = make_window()
    w.runtime_control.set_runtime(vllm_runtime)
    assert w.attach_control.attach(keyed_server.base_url, API_KEY)
    qtbot.waitUntil(lambda: w.attach_control.attached is not None, timeout=30_000)
    w.tabs.setCurrentWidget(w.chat_panel)
    chat, panel = w.chat_control, w.chat_panel
    qtbot.waitUntil(lambda: chat.loaded and panel.send_button.isEnabled(), timeout=10_000)
    target = panel.target.text().replace(ZWSP, "")
    assert target == f"Talking to {keyed_server.model_name} at {keyed_server.base_url}/v1 " \
        "(watched server)"

    # a reply streams in with its figures
    panel.system_prompt.setText("You are a terse assistant.")
    panel.temperature.setValue(0.0)
    panel.max_tokens.setValue(24)
    _reply(qtbot, w, "Which river runs north of the city?")
    user, reply = chat.conversation.messages
    assert user.text == "Which river runs north of the city?" and reply.role == "assistant"
    assert reply.error is None and reply.text and reply.stats is not None
    s = reply.stats
    assert s.ttft_s is not None and s.ttft_s > 0 and not s.counted
    assert 1 <= s.completion_tokens <= 24 and s.prompt_tokens and s.prompt_tokens > 10
    shown = panel.view.toPlainText()
    assert "TTFT" in shown and f"{s.completion_tokens} completion tokens" in shown
    assert panel.send_button.isEnabled() and not panel.stop_button.isEnabled()

    # Stop cuts a long reply; the pieces streamed into the view before it ended
    panel.max_tokens.setValue(900)
    panel.input.setPlainText("Tell a long story about the mountain.")
    with qtbot.waitSignal(panel.busy_changed, timeout=REPLY_MS,
                          check_params_cb=lambda busy: not busy):
        panel.send_button.click()
        assert panel.stop_button.isEnabled() and not panel.send_button.isEnabled()
        qtbot.waitUntil(lambda: len(chat.streaming) > 0, timeout=REPLY_MS)
        qtbot.waitUntil(lambda: "▍" in panel.view.toPlainText(), timeout=5_000)
        panel.stop_button.click()
    stopped = chat.conversation.messages[-1]
    assert stopped.stats is not None and stopped.stats.stopped
    assert 1 <= stopped.stats.completion_tokens < 900
    assert "stopped" in panel.view.toPlainText()

    # a message longer than the context: one sentence in the conversation, no dialog
    panel.max_tokens.setValue(16)
    _reply(qtbot, w, " ".join(["mountain river city"] * 800))
    failed = chat.conversation.messages[-1]
    assert failed.error is not None
    assert failed.error.startswith("The conversation is too long for the model's context (1,024")
    assert panel.view.toPlainText().count("too long for the model's context") == 1
    _no_dialog(qtbot)

    # the next message still works: the failed turn is not sent again
    _reply(qtbot, w, "Short again.")
    assert chat.conversation.messages[-1].error is None

    # the conversation is kept for the profile, with its settings
    store = ConversationStore()
    qtbot.waitUntil(lambda: store.load(w.profile.name).conversation == chat.conversation,
                    timeout=10_000)
    kept = store.load(w.profile.name).conversation
    assert kept.settings.system_prompt == "You are a terse assistant." and len(kept.messages) == 8
    doc = json.loads(store.path(w.profile.name).read_text())
    assert API_KEY not in json.dumps(doc)

    folder = os.environ.get("KVPILOT_SCREENSHOTS")
    if folder:
        w.resize(1366, 768)
        qtbot.wait(300)
        Path(folder).mkdir(parents=True, exist_ok=True)
        assert w.grab().save(str(Path(folder) / "chat.png"), "PNG")

    # a server that stopped: one sentence, no dialog
    assert keyed_server.stop().clean
    _reply(qtbot, w, "Anyone there?")
    gone = chat.conversation.messages[-1]
    assert gone.error is not None and " is gone" in gone.error
    _no_dialog(qtbot)

    # Clear forgets the messages, on screen and on disk; the settings stay
    panel.clear_button.click()
    assert chat.conversation.messages == ()
    assert "No messages yet" in panel.view.toPlainText()
    qtbot.waitUntil(lambda: store.load(w.profile.name).conversation.messages == (),
                    timeout=10_000)
    assert store.load(w.profile.name).conversation.settings.system_prompt == (
        "You are a terse assistant."
    )
    w.attach_control.detach()
