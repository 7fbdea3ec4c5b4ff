"""Box layouts written as the list of what they hold, top to bottom or left to right."""

from __future__ import annotations

from typing import TypeAlias

from PySide6.QtWidgets import QBoxLayout, QHBoxLayout, QLayout, QVBoxLayout, QWidget

#: a widget or layout, or ``(widget or layout, stretch)`` for one that takes a share of the
#: room left (the stretch factor of ``QBoxLayout.addWidget`` / ``addLayout``)
Item: TypeAlias = QWidget | QLayout | tuple[QWidget | QLayout, int]

#: left, top, right, bottom (pixels)
Margins: TypeAlias = tuple[int, int, int, int]


def _fill(box: QBoxLayout, items: tuple[Item, ...], margins_px: int | Margins | None,
          spacing_px: int | None) -> None:
    if margins_px is not None:
        box.setContentsMargins(
            *((margins_px,) * 4 if isinstance(margins_px, int) else margins_px))
    if spacing_px is not None:
        box.setSpacing(spacing_px)
    for item in items:
        what, stretch = item if isinstance(item, tuple) else (item, 0)
        if isinstance(what, QLayout):
            box.addLayout(what, stretch)
        else:
            box.addWidget(what, stretch)


def column_layout(
    parent: QWidget | None, *items: Item, margins_px: int | Margins | None = None,
    spacing_px: int | None = None,
) -> QVBoxLayout:
    """``items`` top to bottom, the layout of ``parent`` when given; ``margins_px`` one margin
    for all four sides or (left, top, right, bottom), None: the style's; likewise
    ``spacing_px``."""
    box = QVBoxLayout(parent) if parent is not None else QVBoxLayout()
    _fill(box, items, margins_px, spacing_px)
    return box


def row_layout(
    *items: Item, margins_px: int | Margins | None = None, spacing_px: int | None = None
) -> QHBoxLayout:
    """``items`` left to right (margins and spacing as :func:`column_layout`'s)."""
    box = QHBoxLayout()
    _fill(box, items, margins_px, spacing_px)
    return box
