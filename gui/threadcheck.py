"""A debug check that every Qt object is used on its own thread (on in the tests).

Qt objects are created, touched and destroyed on the thread they live on (for kvpilot's widgets
and carriers: the GUI thread); worker threads hand results back through queued signals only.
With ``KVPILOT_QT_THREAD_CHECK=1`` in the environment (``tests/conftest.py`` sets it, so every
test and every app a test starts runs with it):

- :func:`require_owner` raises :class:`WrongThreadError` when called off the object's thread
  (the workers' delivery and the collector call it);
- :func:`install` routes Qt's own wrong-thread warnings ("... from a different thread",
  "... from another thread") and any cyclic collection on a thread other than the GUI thread
  while the GUI collects by hand (:mod:`kvpilot.gui.collector`) to :func:`violation`, which
  logs them with the Python stack of the offending thread and writes them to stderr.

Every violation is kept (:func:`violations`); the app ends with exit status
:data:`EXIT_WRONG_THREAD` when there was one, and the tests fail on any.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import (
    QMessageLogContext,
    QObject,
    QThread,
    QtMsgType,
    qFormatLogMessage,
    qInstallMessageHandler,
)

from kvpilot.core.app import startup_gc

log = logging.getLogger("kvpilot.gui.threadcheck")

ENV_VAR = "KVPILOT_QT_THREAD_CHECK"
#: the exit status of an app that used a Qt object from a wrong thread while checked
EXIT_WRONG_THREAD = 3
#: Qt's words for a Qt object used from a thread it does not live on
WRONG_THREAD_WORDS = ("different thread", "another thread", "outside the gui thread")

_lock = threading.Lock()
_violations: list[str] = []
_installed = False


class WrongThreadError(AssertionError):
    """A Qt object was used from a thread other than its own."""


def enabled() -> bool:
    """True when ``KVPILOT_QT_THREAD_CHECK`` is set to something other than ``0`` or empty."""
    return os.environ.get(ENV_VAR, "") not in ("", "0")


def violations() -> list[str]:
    """Every violation seen so far (each with the thread and the Python stack)."""
    with _lock:
        return list(_violations)


def take_violations() -> list[str]:
    """The violations seen so far, forgetting them."""
    with _lock:
        taken = list(_violations)
        _violations.clear()
    return taken


def violation(what: str) -> str:
    """Record (and log, and write to stderr) a wrong-thread use; returns the full report."""
    thread = threading.current_thread().name
    stack = "".join(traceback.format_stack()[:-1])
    report = f"kvpilot thread check: {what} (on thread {thread!r})\n{stack}"
    with _lock:
        _violations.append(report)
    if logging.getLogger("kvpilot").handlers:  # the app's log (and its stderr handler)
        log.critical("%s", report)
    else:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(report + "\n")
            sys.stderr.flush()
    return report


def require_owner(obj: QObject, what: str) -> None:
    """With the check on: raise :class:`WrongThreadError` (after recording it) unless the
    calling thread is ``obj``'s thread; ``what`` names the use in the report."""
    if not enabled():
        return
    owner = obj.thread()
    if QThread.currentThread() != owner:
        raise WrongThreadError(violation(f"{what}: {type(obj).__name__} used off its thread"))


def install() -> None:
    """Install the message and collection checks (once; they act only while :func:`enabled`)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    previous = qInstallMessageHandler(None)
    qInstallMessageHandler(_message_handler(previous))
    gc.callbacks.append(_on_collection)


def _message_handler(previous: Callable[..., Any] | None) -> Callable[..., None]:
    def handle(mode: QtMsgType, context: QMessageLogContext, message: str) -> None:
        if previous is not None:
            previous(mode, context, message)
        else:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(qFormatLogMessage(mode, context, message) + "\n")
        if enabled() and any(w in message.lower() for w in WRONG_THREAD_WORDS):
            violation(f"Qt: {message}")

    return handle


def _on_collection(phase: str, info: dict[str, int]) -> None:
    if phase != "start" or not enabled() or not startup_gc.by_hand():
        return
    if threading.current_thread() is not threading.main_thread():
        violation(f"a generation {info.get('generation')} cyclic collection off the GUI thread")
