"""The window's front: start and stop several profiles behind one address, and follow it.

The front is built on the pool (it reads the settings file and plans every profile) and runs in
its own thread (:class:`kvpilot.core.front.server.FrontServer`); a timer reads its status once a
second into the Front tab. While the window runs no server of its own, the dashboard follows the
server that answered the front's last request (its /metrics). The window's close stops the front
and every server it started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer

from kvpilot.gui.controllers import Controller

if TYPE_CHECKING:
    from kvpilot.core.front.server import FrontServer
    from kvpilot.gui.panels.front_panel import FrontPanel
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

#: status refreshes per second
REFRESH_MS = 1000


class FrontController(Controller):
    """Owns the running front (``front``, None when stopped)."""

    def __init__(self, window: WindowWidgets, panel: FrontPanel) -> None:
        super().__init__(window)
        self.panel = panel
        self.front: FrontServer | None = None
        self.following = ""
        self.timer = QTimer(panel)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        panel.start_requested.connect(self.start)
        panel.stop_requested.connect(self.stop)
        self.show_profiles()

    def show_profiles(self) -> None:
        """The settings' profiles as choices (the active one ticked)."""
        settings = self.window.settings
        self.panel.set_profiles(settings.names, (settings.active_profile,))

    def start(self, names: list[str], host: str, port: int, idle_s: int) -> None:
        """Build the front on the pool, then serve it from its thread."""
        from kvpilot.core.app.front import build_front, front_request

        if self.front is not None:
            return
        key = self.window.profile.api_key or None  # the active profile's key guards the front
        request = front_request(names, host=host, port=port, api_key=key,
                                idle_unload_s=idle_s or None)  # 0 on the spin box: off
        self.panel.show_running(False, "planning the profiles…", busy=True)
        self.in_pool(lambda: build_front(request), self._built, self._failed)

    def _built(self, front: FrontServer) -> None:
        front.start()
        self.front = front
        self.panel.show_running(True, f"{front.base_url}/v1")
        self.timer.start()
        self.say(f"front on {front.base_url}/v1", 5000)

    def _failed(self, exc: BaseException) -> None:
        self.panel.show_running(False, "")
        self.say(getattr(exc, "message", None) or str(exc), 15_000)

    def refresh(self) -> None:
        """Read the front's status; the dashboard follows the server that answers."""
        front = self.front
        if front is None:
            return
        if front.error is not None:
            self._failed(front.error)
            self._stopped()
            return
        status = front.status()
        self.panel.show_status(status)
        answering = status["answering"]
        if answering and answering != self.following and not self.services.server_running():
            self.following = answering
            self.services.telemetry.clear()
            self.services.start_metrics(answering, self.window.profile.sampling_hz,
                                        front.pool.key)

    def stop(self, then: object = None) -> None:
        """Stop the front and every server it started (on the pool; ``then`` runs after)."""
        front = self.front
        if front is None:
            return
        self.panel.show_running(True, "stopping the front and its servers…", busy=True)
        self.in_pool(front.stop, lambda _done: self._stopped(then), lambda _e: self._stopped(then))

    def _stopped(self, then: object = None) -> None:
        self.timer.stop()
        self.front = None
        if self.following:
            self.services.stop_metrics()
            self.following = ""
        self.panel.show_running(False, "")
        if callable(then):
            then()

    def shutdown(self) -> None:
        """The window closes: stop the front, waiting for its servers (bounded)."""
        front, self.front = self.front, None
        self.timer.stop()
        if front is not None:
            front.stop()
