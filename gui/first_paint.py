"""Run something once a window is on screen: after its first paint.

Used by the composition root (:mod:`kvpilot.gui.app` logs and marks the moment) and by the main
window, whose background start-up work (GPU probe, vLLM lookup, planning) shares the GIL with
the first paint and so waits for it.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer
from PySide6.QtWidgets import QWidget


class FirstPaint(QObject):
    """Calls ``done`` once, from the event loop, after a widget of ``window`` (the window itself
    or any child) was painted for the first time: the window is on screen.

    ``only`` narrows that to the paints of one widget of the window, and ``when`` to the paints
    made once ``when()`` is true (the planner's table painted with ranked plans in it).

    Watches the application's events until then (one filter, removed after the first paint).
    """

    def __init__(
        self,
        window: QWidget,
        done: Callable[[], None],
        *,
        only: QWidget | None = None,
        when: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(window)
        self._window = window
        self._only = only
        self._when = when
        self._done: Callable[[], None] | None = done
        app = QCoreApplication.instance()
        if app is not None:
            app.installEventFilter(self)

    @property
    def pending(self) -> bool:
        """True until the first paint was seen."""
        return self._done is not None

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            self._done is not None
            and event.type() == QEvent.Type.Paint
            and isinstance(watched, QWidget)
            and (watched is self._only if self._only is not None
                 else watched.window() is self._window)
            and (self._when is None or self._when())
        ):
            done, self._done = self._done, None
            app = QCoreApplication.instance()
            if app is not None:
                app.removeEventFilter(self)
            QTimer.singleShot(0, done)
        return False
