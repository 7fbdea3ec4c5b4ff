"""vLLM's output as bounded lines, from a pipe and from a growing log file."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

from kvpilot.core.vllm.output_lines import MAX_LINE_CHARS, read_lines, tail_lines


def test_lines_are_decoded_and_a_huge_line_is_cut_and_counted() -> None:
    huge = b"x" * (3 * MAX_LINE_CHARS + 10)
    stream = io.BytesIO(b"INFO first\r\n" + huge + b"\n\xff broken utf-8\nlast without newline")
    got: list[str] = []
    read_lines(stream, got.append)
    assert got[0] == "INFO first"
    assert got[1].startswith("x" * (MAX_LINE_CHARS - 1))
    assert got[1].endswith(f"… [{len(huge) - MAX_LINE_CHARS:,} more bytes of this line not shown]")
    assert len(got[1]) < MAX_LINE_CHARS + 100  # never held whole
    assert got[2] == "\ufffd broken utf-8"
    assert got[3] == "last without newline"
    assert stream.closed


def test_a_broken_pipe_ends_the_reading_quietly() -> None:
    class Broken(io.BytesIO):
        def readline(self, _size: int | None = -1) -> bytes:
            raise OSError("the process is gone")

    got: list[str] = []
    read_lines(Broken(), got.append)
    assert got == []


def test_the_tail_of_a_log_file_follows_new_lines_only(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("old line\n")
    got: list[str] = []
    running = threading.Event()
    running.set()
    reader = threading.Thread(target=tail_lines, args=(log, got.append, running.is_set, 0.01))
    reader.start()
    try:
        time.sleep(0.1)
        with log.open("a") as fh:
            fh.write("new line\r\n")
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        running.clear()
        reader.join(5)
    assert got == ["new line"]
    assert not reader.is_alive()
