"""Memory the process has freed, given back to the system: :func:`release_free_heap`.

glibc's ``malloc`` keeps pages that Python, Qt and numpy have freed inside its arenas, ready for
the next allocation; a long-running window (telemetry at 2 Hz, load tests, log lines) frees and
allocates in many sizes and on several threads, so those kept pages add up and show as RSS
that the app does not use. ``malloc_trim(0)`` hands every whole free page back (glibc 2.8 and
newer trim all arenas, not only the top of the main heap). :class:`HeapReleaser` does that once
a minute on its own thread; where the C library has no ``malloc_trim`` (musl, macOS, Windows)
nothing is done.

Measured by ``benchmarks/soak.py`` (docs/reliability.md): in 30 minutes of serving with the load
test on a thread of the app, malloc had kept 9 MB of freed memory at the end without this; with
it nothing is left to give back at the end, and the 31 calls gave back 45 MB, the longest in
1.9 ms.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from kvpilot.core.base.background import BackgroundLoop

log = logging.getLogger("kvpilot.heap")

#: how often :class:`HeapReleaser` gives freed memory back, in seconds
RELEASE_EVERY_S = 60.0


@dataclass(frozen=True)
class HeapRelease:
    """One call of ``malloc_trim``: the process's RSS before and after (bytes) and how long the
    call took (seconds)."""

    rss_before_bytes: int
    rss_after_bytes: int
    took_s: float

    @property
    def released_bytes(self) -> int:
        """RSS given back (bytes; 0 when other threads allocated more meanwhile)."""
        return max(0, self.rss_before_bytes - self.rss_after_bytes)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` from the running process's C library, or None where there is
    none. ``CDLL(None)`` looks the symbol up in what is already loaded (no ``ldconfig``); a
    ctypes call releases the GIL while it runs."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no dlopen(NULL) (Windows) or no symbol
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def can_release() -> bool:
    """True where the C library has ``malloc_trim`` (glibc)."""
    return _malloc_trim() is not None


def release_free_heap() -> HeapRelease | None:
    """Give every whole free page that malloc keeps back to the system.

    Blocking for as long as glibc walks its arenas (5 ms to give back 62 MB from a fragmented
    heap on a 2-core test machine, 0.3 ms when there is nothing to give); call it off the GUI
    thread. Returns None where the C library
    has no ``malloc_trim``. Never raises.
    """
    trim = _malloc_trim()
    if trim is None:
        return None
    me = psutil.Process()
    before = me.memory_info().rss
    started = time.perf_counter()
    trim(0)
    took = time.perf_counter() - started
    return HeapRelease(before, me.memory_info().rss, took)


class HeapReleaser(BackgroundLoop):
    """Calls :func:`release_free_heap` every ``period_s`` seconds on a daemon thread.

    ``released_bytes`` and ``releases`` add up what it gave back and how often, ``longest_s`` is
    the longest call (seconds); ``last`` is the latest :class:`HeapRelease` (None before the
    first). Where ``malloc_trim`` does not exist,
    :meth:`start` does nothing.
    """

    def __init__(self, period_s: float = RELEASE_EVERY_S) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s must be positive, not {period_s!r}")
        super().__init__("kvpilot-heap-release")
        self.period_s = period_s
        self.released_bytes = 0
        self.releases = 0
        self.longest_s = 0.0
        self.last: HeapRelease | None = None

    def start(self) -> None:
        """Start the thread where ``malloc_trim`` exists (no-op elsewhere, or when running)."""
        if can_release():
            super().start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.period_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            done = release_free_heap()
            if done is None:
                return
            self.last = done
            self.releases += 1
            self.released_bytes += done.released_bytes
            self.longest_s = max(self.longest_s, done.took_s)
            log.debug("gave %.1f MB of freed heap back in %.1f ms",
                      done.released_bytes / 2**20, done.took_s * 1000)
