"""vLLM's output as lines: from its pipes, bounded per line, or from the tail of a log file.

A line longer than :data:`MAX_LINE_CHARS` bytes is never held whole: its first piece is kept
and the rest counted ("… [N more bytes of this line not shown]").
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

#: longest output line kept whole (characters); the rest of a longer line is cut and counted
MAX_LINE_CHARS = 64 * 1024


def with_cut(line: str, cut: int) -> str:
    """``line`` with a note of the ``cut`` bytes dropped from it (none: the line itself)."""
    return f"{line} … [{cut:,} more bytes of this line not shown]" if cut else line


def read_lines(stream: IO[bytes], on_line: Callable[[str], None]) -> None:
    """Call ``on_line`` with each line of ``stream`` (decoded, line end removed) until its end;
    reads at most :data:`MAX_LINE_CHARS` bytes at a time; closes the stream. A stream that
    breaks (the process is gone) ends the reading quietly."""
    kept: str | None = None  # the first piece of the line being read
    cut = 0  # bytes of that line dropped after the first piece
    try:
        for raw in iter(lambda: stream.readline(MAX_LINE_CHARS), b""):
            if kept is None:
                kept = raw.decode("utf-8", "replace").rstrip("\r\n")
            else:
                cut += len(raw.rstrip(b"\r\n"))
            if raw.endswith(b"\n"):
                on_line(with_cut(kept, cut))
                kept, cut = None, 0
        if kept is not None:
            on_line(with_cut(kept, cut))
    except (OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def tail_lines(
    path: Path, on_line: Callable[[str], None], running: Callable[[], bool],
    poll_s: float = 0.25,
) -> None:
    """Call ``on_line`` with each line appended to ``path`` from now on, while ``running()``;
    polls every ``poll_s`` seconds when there is nothing new."""
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        fh.seek(0, os.SEEK_END)
        while running():
            line = fh.readline()
            if not line:
                time.sleep(poll_s)
                continue
            on_line(line.rstrip("\r\n"))
