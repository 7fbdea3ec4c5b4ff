"""Python's cyclic garbage collector held off while the desktop app starts, then told to leave
the start-up's objects alone: :func:`hold_during_start` and :func:`settle_after_start`.

Starting the window creates some 100,000 objects that the collector tracks (the classes,
functions and enums of PySide6, pyqtgraph, numpy and kvpilot), and almost none of them is ever
garbage. While they are being created, the collector's thresholds trip again and again, and
each older-generation pass walks everything made so far. Afterwards every full collection walks
them again, about 40 ms each time on the GUI thread. So ``kvpilot gui``:

1. disables the collector before it imports the GUI (:func:`hold_during_start`);
2. once the window has painted, moves every object alive then into the collector's permanent
   generation (``gc.freeze()``) and enables it again (:func:`settle_after_start`). Later
   collections look only at objects made after the start.

Reference counting frees everything as usual in between; only cycles wait.

A desktop app must also choose the thread that collects: Python runs an automatic collection
on whichever thread happens to allocate when a threshold trips, a planning thread as often as
any, and a Qt object that sits in a reference cycle (a dialog whose slots refer back to it) is
then destroyed on that thread, which Qt does not allow (it crashed the window). So the window
calls :func:`collect_by_hand` and collects on its GUI thread only (``gui/collector.py``); the
automatic collector then stays off, also after :func:`settle_after_start`. Measured (2 cores):

- frozen builds with and without this, taking turns with a bare PySide6 + pyqtgraph window, 11
  starts each: first shown window 0.683 → 0.617 s (median; the bare window 0.542 s), so what
  kvpilot adds to a bare window went from 0.14 to 0.075 s;
- a full collection once the window is up: 37 ms → under 0.1 ms (a source run);
- about 450 unreachable objects from the start stay frozen for good, instead of paying the
  50-60 ms collection that would free them first.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass

log = logging.getLogger("kvpilot.startup_gc")

_lock = threading.Lock()
_held_since: float | None = None  # time.monotonic() when this module disabled the collector
_by_hand = False  # the owner runs every collection itself (collect_by_hand)


@dataclass(frozen=True)
class StartSettled:
    """What :func:`settle_after_start` did: ``held_s`` seconds without cyclic collection and
    ``frozen_objects`` objects moved to the permanent generation (``gc.get_freeze_count()``)."""

    held_s: float
    frozen_objects: int


def hold_during_start() -> bool:
    """Disable the cyclic collector until :func:`settle_after_start`.

    Returns True when this call disabled it; False when it was already off (disabled by someone
    else, or held already), in which case :func:`settle_after_start` leaves it as it is.
    """
    global _held_since
    with _lock:
        if _held_since is not None or not gc.isenabled():
            return False
        gc.disable()
        _held_since = time.monotonic()
        return True


def holding() -> bool:
    """True between :func:`hold_during_start` and :func:`settle_after_start`."""
    with _lock:
        return _held_since is not None


def settle_after_start() -> StartSettled | None:
    """Freeze every object alive now (``gc.freeze()``) and enable the collector again (unless
    :func:`collect_by_hand` was called: then it stays off).

    Does nothing and returns None unless :func:`hold_during_start` disabled the collector, so
    it is safe to call from several places (the first paint, a fallback timer, the exit path).
    """
    global _held_since
    with _lock:
        if _held_since is None:
            return None
        held_s = time.monotonic() - _held_since
        _held_since = None
        gc.freeze()
        if not _by_hand:
            gc.enable()
        settled = StartSettled(held_s=held_s, frozen_objects=gc.get_freeze_count())
    log.info("start-up: cyclic collection held for %.2f s; %d objects frozen",
              settled.held_s, settled.frozen_objects)
    return settled


def collect_by_hand() -> None:
    """From now on the caller runs every cyclic collection itself (``gc.collect`` on the one
    thread allowed to free what cycles hold); the automatic collector is off, and
    :func:`settle_after_start` leaves it off."""
    global _by_hand
    with _lock:
        _by_hand = True
        gc.disable()


def collect_automatically() -> None:
    """Undo :func:`collect_by_hand`: the automatic collector runs again (unless the start-up
    still holds it)."""
    global _by_hand
    with _lock:
        _by_hand = False
        if _held_since is None:
            gc.enable()


def by_hand() -> bool:
    """True between :func:`collect_by_hand` and :func:`collect_automatically`."""
    with _lock:
        return _by_hand
