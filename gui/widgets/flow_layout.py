"""A layout that places its widgets left to right and wraps them onto new rows.

Its minimum width is the widest single item, not the sum of a row, so a row of long button
labels never widens the window: at a narrow width the items take more rows (the layout has a
height for each width).
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QPoint, QRect, QSize, Qt
from PySide6.QtWidgets import QLayout, QLayoutItem, QWidget


class FlowLayout(QLayout):
    """Items in rows, wrapped at the available width; spacings in pixels."""

    def __init__(
        self, parent: QWidget | None = None, *, h_spacing_px: int = 6, v_spacing_px: int = 4
    ) -> None:
        super().__init__(parent)
        self._items: list[QLayoutItem] = []
        self._h_px = h_spacing_px
        self._v_px = v_spacing_px
        self.setContentsMargins(QMargins(0, 0, 0, 0))

    def addItem(self, item: QLayoutItem) -> None:
        """Append ``item`` (called by :meth:`addWidget`)."""
        self._items.append(item)

    def count(self) -> int:
        """Number of items."""
        return len(self._items)

    def itemAt(self, index: int) -> QLayoutItem | None:
        """The item at ``index`` or None."""
        return self._items[index] if 0 <= index < len(self._items) else None

    def takeAt(self, index: int) -> QLayoutItem | None:
        """Remove and return the item at ``index`` (None when out of range)."""
        if 0 <= index < len(self._items):
            return self._items.pop(index)
        return None

    def expandingDirections(self) -> Qt.Orientation:
        """Neither direction: the rows take the width they are given."""
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:
        """True: the height depends on how many rows the width leaves."""
        return True

    def heightForWidth(self, width: int) -> int:
        """Height in pixels the items need at ``width`` pixels."""
        return self._place(QRect(0, 0, width, 0), move=False)

    def setGeometry(self, rect: QRect) -> None:
        """Place the items inside ``rect``."""
        super().setGeometry(rect)
        self._place(rect, move=True)

    def sizeHint(self) -> QSize:
        """The minimum size (the layout asks for no more width than its widest item)."""
        return self.minimumSize()

    def minimumSize(self) -> QSize:
        """Widest item's width; tallest item's height (plus the margins)."""
        size = QSize()
        for item in self._items:
            size = size.expandedTo(item.minimumSize())
        m = self.contentsMargins()
        return size + QSize(m.left() + m.right(), m.top() + m.bottom())

    def _place(self, rect: QRect, *, move: bool) -> int:
        m = self.contentsMargins()
        area = rect.adjusted(m.left(), m.top(), -m.right(), -m.bottom())
        x, y, row_h = area.x(), area.y(), 0
        for item in self._items:
            if item.isEmpty():
                continue
            hint = item.sizeHint()
            w = min(hint.width(), max(area.width(), item.minimumSize().width()))
            if x > area.x() and x + w > area.right() + 1:
                x, y, row_h = area.x(), y + row_h + self._v_px, 0
            if move:
                item.setGeometry(QRect(QPoint(x, y), QSize(w, hint.height())))
            x += w + self._h_px
            row_h = max(row_h, hint.height())
        return y + row_h - rect.y() + m.bottom()
