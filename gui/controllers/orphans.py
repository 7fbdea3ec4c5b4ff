"""A server an earlier kvpilot left running: offer to keep watching it or to stop it.

At start-up the pidfiles in the data folder are checked on the pool; a live server whose kvpilot
is gone is shown in the bar above the panels. Keeping it supervises it from now on (closing the
window then stops it, as for a server this window started); stopping ends its process group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.gui.controllers import Controller

if TYPE_CHECKING:
    from kvpilot.core.hardware.proctree import StopReport
    from kvpilot.core.vllm.orphans import OrphanServer
    from kvpilot.gui.controllers.server import ServerController
    from kvpilot.gui.widgets.window_widgets import WindowWidgets


class OrphanController(Controller):
    """Owns the orphaned servers found (the first one is offered)."""

    def __init__(self, window: WindowWidgets, server: ServerController) -> None:
        super().__init__(window)
        self.server = server
        self.orphans: list[OrphanServer] = []

    def find(self) -> None:
        """Look for orphaned servers on the pool."""
        self.in_pool(self.services.find_orphans, self.on_orphans)

    def on_orphans(self, orphans: list[OrphanServer]) -> None:
        window = self.window
        self.orphans = list(orphans)
        if not self.orphans:
            window.orphan_bar.setVisible(False)
            return
        o = self.orphans[0]
        rec = o.record
        more = f" (and {len(self.orphans) - 1} more)" if len(self.orphans) > 1 else ""
        window.orphan_label.setText(
            f"A vLLM server started by an earlier kvpilot is still running: {rec.model} on "
            f"{rec.base_url}, {len(o.pids)} process(es){more}. It holds GPU memory."
        )
        window.orphan_adopt.setEnabled(o.leader_alive and not self.services.server_running())
        window.orphan_bar.setVisible(True)

    def stop_orphan(self) -> bool:
        """Stop the first orphaned server in the background (its whole process group)."""
        if not self.orphans:
            return False
        orphan = self.orphans[0]
        window = self.window
        window.orphan_stop.setEnabled(False)
        window.orphan_label.setText(f"stopping the server on {orphan.record.base_url}…")

        def done(_report: StopReport | None) -> None:
            window.orphan_stop.setEnabled(True)
            self.say(f"stopped the earlier server on port {orphan.record.port}", 10_000)
            self.find()

        self.in_pool(lambda: self.services.stop_orphan(orphan), done, lambda _exc: done(None))
        return True

    def adopt_orphan(self) -> bool:
        """Watch the first orphaned server as if this window had started it."""
        if not self.orphans or self.services.server_running():
            return False
        orphan = self.orphans.pop(0)
        self.server.adopted(orphan.record.model)
        self.services.adopt_orphan(orphan)
        self.on_orphans(self.orphans)
        return True
