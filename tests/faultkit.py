"""Helpers of the fault tests (tests/faults): the event-loop lateness probe and the block it
catches.

The GUI's goal (nothing blocks the event loop longer than 50 ms) is measured and printed by
``benchmarks/gui_responsiveness.py``; a wall-clock goal that tight fails on a busy two-core
machine without any fault (a 52 ms tick on a loaded CI runner). The fault tests catch what the
faults they guard against did: a join of a stuck sampler thread for 2 to 5 s on the GUI thread,
a pool thread held for a download of minutes (checked directly: no pool thread is busy).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

#: a block of the event loop the tests call a fault: one second, half the shortest block these
#: tests guard against (a 2 s join) and 20x the GUI's goal (``benchmarks/gui_responsiveness.py``,
#: 50 ms); on a two-core machine loaded with two busy loops and a test run beside it the worst
#: tick was 431 ms late
BLOCKED_S = 1.0


@dataclass
class LoopProbe:
    """Ticks of a 5 ms precise QTimer; the longest gap between two ticks is the worst block."""

    interval_s: float = 0.005
    ticks: list[float] = field(default_factory=list)

    def tick(self) -> None:
        self.ticks.append(time.perf_counter())

    @property
    def worst_lateness_s(self) -> float:
        """Longest gap between ticks beyond the interval (seconds)."""
        gaps = [b - a for a, b in zip(self.ticks, self.ticks[1:], strict=False)]
        return max(gaps, default=0.0) - self.interval_s

    def lateness_s(self) -> list[float]:
        """How much later than the interval each tick came after the one before (seconds)."""
        return [b - a - self.interval_s for a, b in zip(self.ticks, self.ticks[1:], strict=False)]


# The three scenes of tests/faults/test_gui_event_loop.py, shared with the benchmark that times
# them (benchmarks/gui_responsiveness.py): the hung endpoint, the slow download, the log flood.


@contextmanager
def silent_server() -> Iterator[str]:
    """A loopback TCP server that accepts connections and never sends a byte; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        sock.close()


def slow_download(started: threading.Event, release: threading.Event) -> Callable[..., Any]:
    """A stand-in for ``launch.launchable_spec``: sets ``started``, reports download progress
    every millisecond (the reports the Hub download sends) until ``release`` is set or the
    download is cancelled, then raises ``DownloadCancelled``."""
    from kvpilot.core.hub import download, download_errors

    def fetch(spec: Any, *, on_progress: Callable[[Any], None] | None = None,
              cancel_event: threading.Event | None = None) -> Any:
        started.set()
        total = 1 << 30
        for i in range(2000):
            if release.is_set() or (cancel_event is not None and cancel_event.is_set()):
                break
            if on_progress is not None:
                on_progress(download.DownloadProgress(
                    "downloading", i << 19, total, i << 19, 5e8, 2.0, "model.safetensors", 0, 1))
            time.sleep(0.001)
        release.wait(20)
        raise download_errors.DownloadCancelled(f"download of {spec.model} cancelled")

    return fetch


#: lines :func:`flood_log` sends by default, and what the last of them holds
FLOOD_LINES = 100_000
FLOOD_LAST = f"flood line {FLOOD_LINES - 1:09d}"


def flood_log(
    sink: Callable[[Any], None], total: int = FLOOD_LINES, rate_per_s: int = 100_000
) -> None:
    """Send ``total`` vLLM log lines to a supervisor event sink at ``rate_per_s`` (as the
    supervisor's reader thread sends them); the line numbers count up from 0."""
    from kvpilot.core.vllm.states import LogLineEvent

    started = time.monotonic()
    for i in range(total):
        sink(LogLineEvent("stdout", "(APIServer pid=1) INFO 11-29 08:10:45 [x.py:1] "
                                    f"flood line {i:09d}", 0.0))
        if i % 1000 == 999:
            ahead = started + (i + 1) / rate_per_s - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
