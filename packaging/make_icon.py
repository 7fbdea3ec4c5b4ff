"""Draw kvpilot's application icon (a stacked memory gauge) as PNG files.

Run from the repository root; it rewrites ``resources/icons/kvpilot-<size>.png`` for every size in
:data:`SIZES` and ``resources/icons/kvpilot.png`` (the 256 px one)::

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/make_icon.py

The drawing is vector-based, so every size is rendered directly rather than scaled.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QGuiApplication, QImage, QLinearGradient, QPainter, QPen

SIZES = (32, 48, 64, 128, 256)
ICON_DIR = Path(__file__).resolve().parent.parent / "resources" / "icons"

#: the stacked bar, bottom to top: weights, activations, KV cache, free (fractions of its height)
BANDS: tuple[tuple[float, str], ...] = (
    (0.30, "#5b8def"),  # weights
    (0.10, "#f2a541"),  # activation peak
    (0.42, "#3ecf8e"),  # KV cache
)
BACKGROUND_TOP = "#1f2633"
BACKGROUND_BOTTOM = "#10141c"
FRAME = "#d8dee9"


def draw(size_px: int) -> QImage:
    """Render the icon at ``size_px`` × ``size_px`` pixels (ARGB, transparent corners)."""
    image = QImage(size_px, size_px, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    s = float(size_px)
    p = QPainter(image)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)

    # rounded tile
    gradient = QLinearGradient(0, 0, 0, s)
    gradient.setColorAt(0.0, QColor(BACKGROUND_TOP))
    gradient.setColorAt(1.0, QColor(BACKGROUND_BOTTOM))
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QBrush(gradient))
    p.drawRoundedRect(QRectF(0.02 * s, 0.02 * s, 0.96 * s, 0.96 * s), 0.2 * s, 0.2 * s)

    # the memory bar: a framed column filled by bands from the bottom up
    bar = QRectF(0.30 * s, 0.16 * s, 0.40 * s, 0.68 * s)
    inner = bar.adjusted(0.035 * s, 0.035 * s, -0.035 * s, -0.035 * s)
    y = inner.bottom()
    gap = max(1.0, 0.012 * s)
    for fraction, colour in BANDS:
        height = fraction * inner.height()
        p.setBrush(QColor(colour))
        p.drawRect(QRectF(inner.left(), y - height + gap / 2, inner.width(), height - gap))
        y -= height
    pen = QPen(QColor(FRAME))
    pen.setWidthF(max(1.0, 0.03 * s))
    p.setPen(pen)
    p.setBrush(Qt.BrushStyle.NoBrush)
    p.drawRoundedRect(bar, 0.04 * s, 0.04 * s)

    # the utilization mark: a pointer at the gpu_memory_utilization line, left of the bar
    mark_y = inner.bottom() - sum(f for f, _ in BANDS) * inner.height()
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor(FRAME))
    tip_x = bar.left() - 0.03 * s
    half = 0.06 * s
    p.drawPolygon(
        [
            QPointF(tip_x, mark_y),
            QPointF(tip_x - 0.11 * s, mark_y - half),
            QPointF(tip_x - 0.11 * s, mark_y + half),
        ]
    )
    p.end()
    return image


def main() -> int:
    """Write every size; returns the exit status."""
    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    ICON_DIR.mkdir(parents=True, exist_ok=True)
    for size_px in SIZES:
        target = ICON_DIR / f"kvpilot-{size_px}.png"
        if not draw(size_px).save(str(target)):
            print(f"make_icon: cannot write {target}", file=sys.stderr)
            return 1
    if not draw(256).save(str(ICON_DIR / "kvpilot.png")):
        return 1
    print(f"make_icon: wrote {len(SIZES) + 1} PNG files to {ICON_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
