"""Memory and update time of the server log view at its 5,000-line bound, on screen (offscreen Qt).

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/log_view_memory.py [--lines 5000]

Each view runs in its own process (RSS is per process): kvpilot's ``LogView`` (a table over a
list model) and, for comparison, a ``QPlainTextEdit`` bounded the same way and a ``QListView``
over the same model. Lines arrive one per update, as from a quiet server, each update followed
by the event processing that paints it. Prints the RSS growth once the view holds ``--lines``
lines, after twice as many more (at the bound: should be flat), and the time per update.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

LINE = 'INFO:     127.0.0.1:49544 - "POST /v1/completions HTTP/1.1" 200 OK'
VIEWS = ("LogView (table)", "QPlainTextEdit", "QListView")


def measure(view: str, lines: int) -> dict[str, float]:
    """Run in the child: fill ``view`` to ``lines`` lines, then twice as many more."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import psutil
    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication, QListView, QPlainTextEdit

    import kvpilot.gui  # noqa: F401 - pins pyqtgraph to PySide6
    from kvpilot.gui.panels.server_panel import LogLinesModel, LogView

    app = QApplication.instance() or QApplication([])
    append: object
    if view == VIEWS[0]:
        widget = LogView(max_lines=lines)

        def append(text: str) -> None:
            widget.append("INFO", text)
    elif view == VIEWS[1]:
        widget = QPlainTextEdit()
        widget.setReadOnly(True)
        widget.setMaximumBlockCount(lines)

        def append(text: str) -> None:
            widget.appendPlainText(text)
    else:
        model = LogLinesModel(lines)
        widget = QListView()
        widget.setUniformItemSizes(True)
        widget.setModel(model)

        def append(text: str) -> None:
            model.extend([("INFO", text)])
            widget.scrollToBottom()
    widget.resize(900, 500)
    widget.show()
    QCoreApplication.processEvents()
    me = psutil.Process()
    rss0 = me.memory_info().rss

    def feed(n: int, start: int) -> float:
        began = time.perf_counter()
        for i in range(start, start + n):
            append(f"{LINE} {i}")
            QCoreApplication.processEvents()
        return (time.perf_counter() - began) / n

    fill_s = feed(lines, 0)
    full_mb = (me.memory_info().rss - rss0) / 2**20
    bound_s = feed(2 * lines, lines)
    after_mb = (me.memory_info().rss - rss0) / 2**20
    del app
    return {"full_mb": full_mb, "after_mb": after_mb, "fill_ms": fill_s * 1000,
            "bound_ms": bound_s * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--child", choices=VIEWS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.lines)))
        return 0
    print(f"{args.lines:,} lines of {len(LINE) + 5} characters, one per update, view on screen")
    print(f"{'view':<18} {'RSS at bound':>13} {'after 2x more':>14} {'ms/update filling':>18} "
          f"{'ms/update at bound':>19}")
    for view in VIEWS:
        out = subprocess.run([sys.executable, __file__, "--lines", str(args.lines), "--child",
                              view], capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{view:<18} {r['full_mb']:>10.1f} MB {r['after_mb']:>11.1f} MB "
              f"{r['fill_ms']:>18.2f} {r['bound_ms']:>19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
