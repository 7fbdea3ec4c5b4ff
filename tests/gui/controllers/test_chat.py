"""The Chat tab's controller without a server: where the tab sits, what it says, a damaged
saved chat, the image button for vision models, and ``kvpilot gui --panel chat``."""

from __future__ import annotations

from pathlib import Path

from testpaths import DATA

from kvpilot.core.app.watch import ServerIdentity
from kvpilot.core.base.conversation import ChatMessage, ReplyStats
from kvpilot.core.chat.store import ConversationStore


def _open_chat(window, qtbot) -> None:
    window.tabs.setCurrentWidget(window.chat_panel)
    qtbot.waitUntil(lambda: window.chat_control.loaded, timeout=10_000)


def test_the_chat_tab_says_there_is_no_server(make_window, qtbot) -> None:
    w = make_window()
    names = [w.tabs.tabText(i) for i in range(w.tabs.count())]
    assert names == ["Plan", "Dashboard", "Chat", "Log", "Runs", "Front"]
    _open_chat(w, qtbot)
    panel = w.chat_panel
    assert panel.target.text().startswith("No server to talk to")
    assert not panel.send_button.isEnabled() and not panel.stop_button.isEnabled()
    assert not panel.image_button.isVisible()
    assert not w.chat_control.send("hello")  # nothing to send to: no message is added
    assert w.chat_control.conversation.messages == ()


def test_a_damaged_saved_chat_is_a_warning_not_a_crash(
    make_window, qtbot, tmp_path: Path
) -> None:
    store = ConversationStore(tmp_path / "data" / "chats")
    store.path("Default").parent.mkdir(parents=True)
    store.path("Default").write_text('{"version": 1, "messages": [{"role"')
    w = make_window()
    assert w.profile.name == "Default"
    _open_chat(w, qtbot)
    assert "could not be read" in w.statusBar().currentMessage()
    assert w.chat_control.conversation.messages == ()
    assert store.path("Default").with_name(store.path("Default").name + ".damaged").exists()


def test_the_image_button_is_there_only_for_a_vision_model(make_window, qtbot) -> None:
    w = make_window()
    _open_chat(w, qtbot)
    for model, takes in (("qwen2.5-vl-7b-instruct", True), ("qwen2.5-7b-instruct", False)):
        w.attach_control.attached = ServerIdentity(
            base_url="http://127.0.0.1:9", version="0.32.0", model_id=model,
            model_root=str(DATA / "models" / model), max_model_len=4096,
        )
        w.chat_control.refresh()
        qtbot.waitUntil(lambda m=model: str(DATA / "models" / m) in w.chat_control._vision,
                        timeout=10_000)
        assert w.chat_panel.image_button.isVisible() is takes
        assert w.chat_control.target is not None and w.chat_control.target.takes_images is takes
        assert w.chat_panel.send_button.isEnabled()
    w.attach_control.attached = None


def test_kvpilot_gui_screenshots_the_chat_tab_with_the_saved_conversation(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    from kvpilot.core.base.conversation import Conversation

    data = tmp_path / "data"
    conv = Conversation().add(ChatMessage("user", "hello")).add(ChatMessage(
        "assistant", "hi", stats=ReplyStats(ttft_s=0.1, duration_s=0.2, prompt_tokens=5,
                                            completion_tokens=2, tokens_per_s=20.0)))
    ConversationStore(data / "chats").save("Default", conv)
    out = tmp_path / "chat.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "KVPILOT_CONFIG_DIR": str(tmp_path / "c"),
           "KVPILOT_DATA_DIR": str(data), "KVPILOT_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "gui", "--fake-gpu", "rtx4090-desktop",
         "--panel", "chat", "--screenshot", str(out)],
        capture_output=True, text=True, timeout=180, env=env, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    image = QImage(str(out))
    assert not image.isNull() and image.width() >= 600
    assert ConversationStore(data / "chats").load("Default").conversation == conv  # kept as is


def test_an_image_goes_with_the_message_to_a_vision_model(make_window, qtbot, tmp_path) -> None:
    """A vision model's chat sends the picked image as an ``image_url`` part (a real local HTTP
    server stands in for vLLM here: the CPU engine serves no vision model in these tests)."""
    import base64

    from chatkit import PostServer, piece, sse_reply

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    (tmp_path / "dot.png").write_bytes(png)
    server = PostServer()
    server.handler = lambda h: sse_reply(h, [
        piece("a dot", "stop"),
        'data: {"choices": [], "usage": {"prompt_tokens": 70, "completion_tokens": 2}}',
        "data: [DONE]",
    ])
    try:
        w = make_window()
        _open_chat(w, qtbot)
        vl = str(DATA / "models" / "qwen2.5-vl-7b-instruct")
        w.attach_control.attached = ServerIdentity(
            base_url=server.url, version="0.32.0", model_id="qwen-vl", model_root=vl,
            max_model_len=4096,
        )
        w.chat_control.refresh()
        qtbot.waitUntil(w.chat_panel.image_button.isVisible, timeout=10_000)
        w.chat_control.attach_image(tmp_path / "dot.png")
        qtbot.waitUntil(w.chat_panel.image_label.isVisible, timeout=10_000)
        assert "dot.png" in w.chat_panel.image_label.text()
        w.chat_panel.input.setPlainText("What is in the picture?")
        with qtbot.waitSignal(w.chat_panel.busy_changed, timeout=30_000,
                              check_params_cb=lambda busy: not busy):
            w.chat_panel.send_button.click()
        user = server.bodies[0]["messages"][-1]
        assert user == {"role": "user", "content": [
            {"type": "text", "text": "What is in the picture?"},
            {"type": "image_url", "image_url": {
                "url": "data:image/png;base64," + base64.b64encode(png).decode()}},
        ]}
        assert not w.chat_panel.image_label.isVisible()  # the image went with that message
        shown = w.chat_panel.view.toPlainText()
        assert "[image attached]" in shown and "a dot" in shown and "70 prompt" in shown
    finally:
        w.attach_control.attached = None
        server.close()
