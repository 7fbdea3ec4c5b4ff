"""Small reusable widgets: the stacked memory bar, a coloured status dot, the wrapping label and
the push button built in one call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QMouseEvent, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import QLabel, QPushButton, QSizePolicy, QToolTip, QWidget

from kvpilot.gui import format as fmt


def wrapped_label(text: str = "", *, name: str = "", heading: bool = False) -> QLabel:
    """A label whose text wraps to the width it is given: object name ``name`` (none when
    ""), in bold with ``heading``."""
    label = QLabel(text)
    if name:
        label.setObjectName(name)
    if heading:
        label.setStyleSheet("font-weight: 600")
    label.setWordWrap(True)
    return label


def push_button(
    text: str,
    *,
    name: str = "",
    tooltip: str = "",
    on_click: Callable[[], object] | None = None,
    enabled: bool = True,
    hidden: bool = False,
) -> QPushButton:
    """A button labelled ``text``: object name ``name`` and tooltip ``tooltip`` (none when
    ""), ``on_click`` called on each click, greyed out unless ``enabled``, left hidden with
    ``hidden`` (shown later by whoever owns it)."""
    button = QPushButton(text)
    if name:
        button.setObjectName(name)
    if tooltip:
        button.setToolTip(tooltip)
    if on_click is not None:
        button.clicked.connect(on_click)
    if not enabled:
        button.setEnabled(False)
    if hidden:
        button.setVisible(False)
    return button


@dataclass(frozen=True)
class Segment:
    """One part of a stacked bar: ``label`` (short), ``value`` (bytes), colour and tooltip."""

    label: str
    value: float
    color: str
    tooltip: str = ""


class StackedBar(QWidget):
    """A horizontal bar split into segments proportional to their values (bytes).

    Each segment shows ``"<label> <GiB>"`` inside when it fits, and its tooltip on hover.
    ``total`` fixes the full width (e.g. the card's memory); segments beyond it are clipped.
    """

    def __init__(self, parent: QWidget | None = None, *, height: int = 26) -> None:
        super().__init__(parent)
        self._segments: list[Segment] = []
        self._total = 0.0
        self._height = height
        self.setMouseTracking(True)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def sizeHint(self) -> QSize:
        return QSize(400, self._height)

    def minimumSizeHint(self) -> QSize:
        return QSize(80, self._height)

    def set_segments(self, segments: Sequence[Segment], total: float | None = None) -> None:
        self._segments = [s for s in segments if s.value > 0]
        self._total = float(total) if total else sum(s.value for s in self._segments)
        self.setToolTip(
            "\n".join(
                f"{s.label}: {fmt.gib(s.value)}" + (f" — {s.tooltip}" if s.tooltip else "")
                for s in self._segments
            )
        )
        self.update()

    def segments(self) -> list[Segment]:
        return list(self._segments)

    def _rects(self) -> list[tuple[QRectF, Segment]]:
        out: list[tuple[QRectF, Segment]] = []
        if self._total <= 0:
            return out
        w = self.width() - 1
        x = 0.0
        for seg in self._segments:
            sw = w * seg.value / self._total
            if x + sw > w:
                sw = max(0.0, w - x)
            out.append((QRectF(x, 0, sw, self.height() - 1), seg))
            x += sw
        return out

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: ARG002 - Qt override
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.fillRect(self.rect(), QColor("#efefef"))
        fm = QFontMetrics(self.font())
        for rect, seg in self._rects():
            color = QColor(seg.color)
            p.fillRect(rect, color)
            p.setPen(QPen(QColor("#ffffff"), 1))
            p.drawLine(rect.topRight(), rect.bottomRight())
            text = f"{seg.label} {fmt.gib_num(seg.value)}"
            if fm.horizontalAdvance(text) + 8 > rect.width():
                text = fmt.gib_num(seg.value)
            if fm.horizontalAdvance(text) + 6 <= rect.width():
                light = color.lightnessF() > 0.6
                p.setPen(QColor("#202020") if light else QColor("#ffffff"))
                p.drawText(rect, Qt.AlignmentFlag.AlignCenter, text)
        p.setPen(QPen(QColor("#909090"), 1))
        p.drawRect(self.rect().adjusted(0, 0, -1, -1))
        p.end()

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        pos = event.position()
        for rect, seg in self._rects():
            if rect.contains(pos):
                tip = f"{seg.label}: {fmt.gib(seg.value)}"
                if seg.tooltip:
                    tip += f"\n{seg.tooltip}"
                QToolTip.showText(event.globalPosition().toPoint(), tip, self)
                return
        super().mouseMoveEvent(event)
