"""Keep every window inside its screen: wrap long unbroken text, elide long names, clamp sizes.

A top-level window grows to its layout's minimum size, and a label's minimum width is its
longest unbreakable run (a URL, a path, a Hub error with ``%2C``). :func:`wrap_anywhere` gives
such runs break opportunities (zero-width spaces), :func:`elide_middle` shortens names shown on
one line, and :func:`clamp_to_screen` keeps a restored or default geometry on the screen.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

ZWSP = "\u200b"
#: room for the window manager's frame (width, height in px) before a window is shown
FRAME_ALLOWANCE = (8, 40)
#: runs shorter than this stay untouched (at ~7 px a character they cannot widen a window)
RUN_CHARS = 40
_LONG_RUN = re.compile(r"\S{" + str(RUN_CHARS) + ",}")
_BREAK_AFTER = re.compile(r"([/\\_.,;:?&=%)\]}-])")


def wrap_anywhere(text: str) -> str:
    """``text`` with a zero-width space after separators inside runs of :data:`RUN_CHARS` or
    more non-spaces, and every :data:`RUN_CHARS` characters where a run has none, so that
    word-wrapping labels can always break."""

    def split(match: re.Match[str]) -> str:
        run = _BREAK_AFTER.sub(lambda m: m.group(1) + ZWSP, match.group(0))
        pieces = run.split(ZWSP)
        out = []
        for piece in pieces:
            while len(piece) > RUN_CHARS:
                out.append(piece[:RUN_CHARS])
                piece = piece[RUN_CHARS:]
            out.append(piece)
        return ZWSP.join(out)

    return _LONG_RUN.sub(split, text)


def elide_middle(text: str, max_chars: int) -> str:
    """``"/very/long/path/to/model"`` -> ``"/very/lo…to/model"`` (at most ``max_chars``)."""
    if len(text) <= max_chars or max_chars < 5:
        return text
    keep = max_chars - 1
    head = keep // 2
    return text[:head] + "…" + text[len(text) - (keep - head):]


def clamp_to_screen(window: QWidget) -> None:
    """Shrink and move ``window`` so that its frame lies inside its screen's available area."""
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return
    area = screen.availableGeometry()
    frame = window.frameGeometry()
    extra_w = max(0, frame.width() - window.width())
    extra_h = max(0, frame.height() - window.height())
    if not window.isVisible():  # no frame yet: leave room for a typical title bar and border
        extra_w, extra_h = max(extra_w, FRAME_ALLOWANCE[0]), max(extra_h, FRAME_ALLOWANCE[1])
    width = min(window.width(), area.width() - extra_w)
    height = min(window.height(), area.height() - extra_h)
    if (width, height) != (window.width(), window.height()):
        window.resize(width, height)
    frame = window.frameGeometry()
    x = min(max(frame.x(), area.x()), area.right() - frame.width() + 1)
    y = min(max(frame.y(), area.y()), area.bottom() - frame.height() + 1)
    if (x, y) != (frame.x(), frame.y()):
        window.move(x, y)
