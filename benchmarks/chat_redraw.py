"""How long the Chat tab holds the GUI thread to draw a conversation, by its length.

Each turn is a short question and a 150-word reply with its figures. For each length it prints
the full redraw (what Send, a finished reply and loading a profile cost: the whole
conversation is laid out again) and the redraw while a reply streams in (only the reply is
laid out again, at most every 80 ms), each the median of several. Goal: the streaming redraw
stays under 10 ms whatever the conversation's length, so that a reply never makes the window
lag.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/chat_redraw.py [--turns 10,200,1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from PySide6.QtWidgets import QApplication

from kvpilot.core.base.conversation import ChatMessage, ReplyStats
from kvpilot.gui.panels.chat_panel import ChatPanel

STATS = ReplyStats(ttft_s=0.12, duration_s=3.0, prompt_tokens=900, completion_tokens=200,
                   tokens_per_s=70.0, finish_reason="stop")


def conversation(turns: int) -> tuple[ChatMessage, ...]:
    """``turns`` questions and replies."""
    out: list[ChatMessage] = []
    for i in range(turns):
        out.append(ChatMessage("user", f"question {i}: how large is the KV cache at 32k?"))
        out.append(ChatMessage("assistant", "the cache holds keys and values " * 25, stats=STATS))
    return tuple(out)


def measure(panel: ChatPanel, app: QApplication, turns: int) -> tuple[float, float]:
    """(median full redraw, median streaming redraw) in milliseconds."""
    messages = conversation(turns)
    full: list[float] = []
    for _ in range(3):
        t0 = time.perf_counter()
        panel.show_messages(messages, ChatMessage("assistant", ""))
        app.processEvents()
        full.append((time.perf_counter() - t0) * 1000)
    stream: list[float] = []
    for k in range(30):
        t0 = time.perf_counter()
        panel.show_streaming(ChatMessage("assistant", "a streamed word " * (5 + 5 * k)))
        app.processEvents()
        stream.append((time.perf_counter() - t0) * 1000)
    return statistics.median(full), statistics.median(stream)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", default="10,200,1000", help="conversation lengths (turns)")
    args = parser.parse_args(argv)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    panel = ChatPanel()
    panel.resize(1300, 480)
    panel.show()
    worst = 0.0
    print(f"{'turns':>6} {'full redraw ms':>15} {'streaming redraw ms':>20}")
    for turns in (int(t) for t in args.turns.split(",")):
        full, stream = measure(panel, app, turns)
        worst = max(worst, stream)
        print(f"{turns:>6} {full:>15.1f} {stream:>20.1f}")
    print(f"streaming redraw, worst median: {worst:.1f} ms (goal < 10 ms: "
          f"{'met' if worst < 10 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
