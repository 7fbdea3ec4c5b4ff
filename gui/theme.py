"""Colours that carry meaning (green fits, amber tight, red fails) and the memory-bar palette."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

OK = "#2e9d4f"
TIGHT = "#d08c00"
FAIL = "#c83a3a"
INFO = "#3a78c8"
MUTED = "#808080"

#: memory bar segments: other processes, weights, activation + graphs, KV cache, free
MEM_OTHER = "#8c6bb1"
MEM_WEIGHTS = "#3a78c8"
MEM_ACTIVATION = "#e0a030"
MEM_KV = "#2e9d4f"
MEM_FREE = "#d8d8d8"
MEM_RESERVED = "#b0b0b0"

#: plot pens
#: the dashboard's grid lines: opaque (lines with alpha are blended pixel by pixel in software)
PLOT_GRID = "#e4e4e4"
#: text on the plots (titles, axes, legends): the light palette's text colour, since the plots
#: keep a white background in every theme (pyqtgraph's default light grey was hard to read)
PLOT_TEXT = "#202020"
#: the legends' box: the plot's white, a little see-through so a curve under it still shows
PLOT_LEGEND_FILL = (255, 255, 255, 215)
PLOT_COLORS = ("#3a78c8", "#e07030", "#2e9d4f", "#c83a3a", "#8c6bb1")
#: the dashboard's throttled band: an edge and an opaque fill (a translucent one costs paint time)
THROTTLED = "#c83a3a"
THROTTLED_FILL = "#f6d3d3"


def apply_theme(app: QApplication, theme: str) -> None:
    """Apply ``system`` (platform default), ``light`` or ``dark``."""
    app.setStyle("Fusion")
    if theme == "dark":
        pal = QPalette()
        pal.setColor(QPalette.ColorRole.Window, QColor(45, 45, 48))
        pal.setColor(QPalette.ColorRole.WindowText, QColor(230, 230, 230))
        pal.setColor(QPalette.ColorRole.Base, QColor(30, 30, 32))
        pal.setColor(QPalette.ColorRole.AlternateBase, QColor(45, 45, 48))
        pal.setColor(QPalette.ColorRole.Text, QColor(230, 230, 230))
        pal.setColor(QPalette.ColorRole.Button, QColor(55, 55, 58))
        pal.setColor(QPalette.ColorRole.ButtonText, QColor(230, 230, 230))
        pal.setColor(QPalette.ColorRole.Highlight, QColor(58, 120, 200))
        pal.setColor(QPalette.ColorRole.HighlightedText, QColor(255, 255, 255))
        pal.setColor(QPalette.ColorRole.ToolTipBase, QColor(55, 55, 58))
        pal.setColor(QPalette.ColorRole.ToolTipText, QColor(230, 230, 230))
        app.setPalette(pal)
    elif theme == "light":
        app.setPalette(app.style().standardPalette())
