"""The Chat panel: the figures under a reply, and long messages that wrap inside a 1,366 x 768
window (cut when a user message is very long)."""

from __future__ import annotations

from kvpilot.core.base.conversation import ChatMessage, ReplyStats
from kvpilot.gui.panels.chat_panel import stats_line


def _open_chat(window, qtbot) -> None:
    window.tabs.setCurrentWidget(window.chat_panel)
    qtbot.waitUntil(lambda: window.chat_control.loaded, timeout=10_000)


def test_long_messages_wrap_inside_a_laptop_screen(make_window, qtbot) -> None:
    w = make_window()
    _open_chat(w, qtbot)
    stats = ReplyStats(ttft_s=0.2, duration_s=2.0, prompt_tokens=1200, completion_tokens=300,
                       tokens_per_s=150.0)
    w.chat_panel.show_messages((
        ChatMessage("user", "https://example.org/" + "x" * 4000),
        ChatMessage("assistant", "word " * 2000, stats=stats),
        ChatMessage("assistant", "", error="The server at http://127.0.0.1:8000 is gone " * 20),
    ))
    w.chat_panel.show_target("Talking to " + "m" * 500, ready=True, takes_images=False)
    w.resize(1366, 768)
    qtbot.wait(50)
    hint = w.minimumSizeHint()
    assert hint.width() <= 1366 and hint.height() <= 768
    assert w.width() <= 1366 and w.height() <= 768
    assert w.chat_panel.view.horizontalScrollBar().maximum() == 0  # wrapped, not scrolled
    assert "(4,020 characters, all of them sent)" in w.chat_panel.view.toPlainText()


def test_the_figures_of_a_reply() -> None:
    s = ReplyStats(ttft_s=0.212, duration_s=1.0, prompt_tokens=42, completion_tokens=24,
                   tokens_per_s=35.4, finish_reason="length")
    assert stats_line(s) == (
        "TTFT 212 ms · 35 tokens/s · 42 prompt + 24 completion tokens · max tokens reached"
    )
    counted = ReplyStats(ttft_s=None, duration_s=0.1, prompt_tokens=None, completion_tokens=0,
                         tokens_per_s=None, counted=True, stopped=True)
    assert stats_line(counted) == (
        "TTFT – · – tokens/s · – prompt + 0 completion tokens (counted) · stopped"
    )


def test_a_streaming_reply_redraws_only_itself(qtbot) -> None:
    from kvpilot.gui.panels.chat_panel import ChatPanel

    panel = ChatPanel()
    qtbot.addWidget(panel)
    history = (ChatMessage("user", "first question"), ChatMessage("assistant", "first answer"),
               ChatMessage("user", "second question"))
    panel.show_messages(history, ChatMessage("assistant", ""))
    for text in ("Hel", "Hello wor", "Hello world, a longer reply"):
        panel.show_streaming(ChatMessage("assistant", text))
    shown = panel.view.toPlainText()
    assert shown.count("first answer") == 1 and shown.count("Model") == 2
    assert shown.rstrip().endswith("Hello world, a longer reply ▍")
    assert "Hel ▍" not in shown and "Hello wor ▍" not in shown
    panel.show_messages((*history, ChatMessage("assistant", "Hello world, a longer reply")))
    assert "▍" not in panel.view.toPlainText()


def test_a_reader_who_scrolled_up_is_not_pulled_down(qtbot) -> None:
    from kvpilot.gui.panels.chat_panel import ChatPanel

    panel = ChatPanel()
    qtbot.addWidget(panel)
    panel.resize(600, 300)
    panel.show()
    history = tuple(ChatMessage("user", f"line {i} " * 30) for i in range(40))
    panel.show_messages(history, ChatMessage("assistant", ""))
    bar = panel.view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # follows the reply
    panel.show_streaming(ChatMessage("assistant", "more " * 50))
    assert bar.value() == bar.maximum()
    bar.setValue(0)
    panel.show_streaming(ChatMessage("assistant", "more " * 200))
    assert bar.value() == 0
