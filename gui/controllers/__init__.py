"""The main window's controllers: each turns one part of the window's events into core calls.

:class:`~kvpilot.gui.widgets.window_widgets.WindowWidgets` builds the widgets and
:class:`~kvpilot.gui.main_window.MainWindow` wires their signals to these; a controller gets the
controllers it asks things of in its constructor and tells the others of its events through
callbacks the window sets, so that imports only go one way (no cycle). A controller asks
:class:`~kvpilot.gui.services.AppServices` (on the pool or in core threads) and updates the
widgets with what comes back, on the GUI thread. None computes what the core decides.

- :mod:`.gpus`: the probe, the GPU choice, planner mode (no GPU), the process names.
- :mod:`.runtimes`: finding vLLM, the "Install vLLM" dialog.
- :mod:`.profiles`: the active profile, the settings dialog, saving the goal.
- :mod:`.planner`: planning for the goal, the feasibility chart, copying a command or export.
- :mod:`.measure`: "Measure on this GPU", the plan's dry run with progress and cancel.
- :mod:`.server`: launch, stop, the supervisor's events and the log.
- :mod:`.fallback`: after a failure, what would fit; the one-click relaunch.
- :mod:`.attach`: watching a server kvpilot did not start.
- :mod:`.benchmark`: the load test of the running or watched server.
- :mod:`.orphans`: a server an earlier kvpilot left running (keep it or stop it).
- :mod:`.chat`: the Chat tab: streamed replies from the running or watched server.

Heavy core modules (fit engine, log parser, supervisor, HTTP) are imported inside the functions
that use them, so that importing the window stays cheap before its first paint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from PySide6.QtWidgets import QDialog

    from kvpilot.gui.widgets.window_widgets import WindowWidgets

_Dialog = TypeVar("_Dialog", bound="QDialog")
T = TypeVar("T")


def _nothing(*_args: object, **_kwargs: object) -> None:
    """A callback nobody has set yet."""


class Controller:
    """Base: the window's widgets a controller drives, and the services."""

    def __init__(self, window: WindowWidgets) -> None:
        self.window = window
        self.services = window.services

    def in_pool(
        self,
        fn: Callable[[], T],
        on_result: Callable[[T], None],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Run ``fn()`` on a pool thread with this window as the owner of its outcome: a result
        that arrives after the window was deleted (closed while a job ran) is dropped."""
        from kvpilot.gui.workers import run_in_pool

        run_in_pool(fn, on_result, on_error, owner=self.window)

    def say(self, text: str, timeout_ms: int = 0) -> None:
        """A status-bar message (``timeout_ms`` 0: until the next one)."""
        self.window.say(text, timeout_ms)

    @staticmethod
    def show_dialog(dialog: _Dialog, *, modal: bool) -> _Dialog:
        """Open ``dialog``: ``modal`` runs it until it closes (then it is deleted on the GUI
        thread once control returns to the event loop; its connections held it, and so the
        window, for good), else it stays open beside the window and this returns at once.
        Returns the dialog."""
        if modal:
            dialog.exec()
            dialog.deleteLater()
        else:
            dialog.show()
        return dialog
