"""Watching a vLLM server kvpilot did not start: attach by URL, detach (it keeps running).

One or two requests on the pool say who serves at the URL; then its /metrics feed the
dashboard like a server of kvpilot's own. An attached server is never stopped from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.gui.controllers.server import ServerAware
from kvpilot.gui.panels.server_panel import ATTACHED

if TYPE_CHECKING:
    from kvpilot.core.app.watch import ServerIdentity, WatchSample
    from kvpilot.gui.dialogs.attach_dialog import AttachDialog


class AttachController(ServerAware):
    """Owns the watched server's identity (``attached``) and its API key."""

    attached: ServerIdentity | None = None
    api_key: str | None = None

    def open_attach(self, *, modal: bool = True) -> AttachDialog:
        """Ask for a server's URL (and key), then :meth:`attach` to it."""
        from kvpilot.gui.dialogs.attach_dialog import AttachDialog

        dialog = AttachDialog(self.window)
        dialog.accepted.connect(lambda: self.attach(*dialog.values()))
        return self.show_dialog(dialog, modal=modal)

    def attach(self, url: str, api_key: str | None = None, log_path: str | None = None) -> bool:
        """Watch the server at ``url`` (kvpilot does not own it: Detach, never Stop).

        False (with the reason shown) while kvpilot runs a server of its own.
        """
        if self.services.server_running():
            self.say("a server is running; stop it before attaching", 8000)
            return False
        target = self.gpus.target
        if target is not None and target.measured:
            self.services.attach_gpu = (target.total_bytes, target.name)
        self.window.server_panel.show_state(SupervisorState.STARTING, detail=f"attaching to {url}")
        self.in_pool(
            lambda: self.services.attach(url, api_key, log_path),
            lambda sample: self._on_attached(url, sample, api_key),
            self._on_attach_error,
        )
        return True

    def _on_attached(self, url: str, sample: WatchSample, api_key: str | None) -> None:
        window = self.window
        ident = sample.identity
        if ident is None:
            self._on_attach_error(RuntimeError(f"the server at {url} did not say what it serves"))
            return
        self.attached = ident
        self.api_key = api_key
        self.server.started_by_us = False
        self.services.telemetry.clear()
        self.services.telemetry.set_vllm_pids(())
        version = f"vLLM {ident.version}" if ident.version else "vLLM"
        window.server_panel.show_state(
            ATTACHED, model=ident.model_id or "", endpoint=f"{ident.base_url}/v1",
            detail=f"{version}, not started by kvpilot",
        )
        cap = sample.capacity
        if cap is not None:
            window.server_panel.show_capacity(
                cap.predicted_kv_tokens, cap.reported.kv_cache_tokens, cap.basis
            )
        self.services.start_metrics(ident.base_url, window.profile.sampling_hz, api_key)
        window.tabs.setCurrentWidget(window.dashboard)
        self.say(f"watching {ident.base_url}", 5000)

    def _on_attach_error(self, exc: BaseException) -> None:
        self.window.server_panel.show_state(None)
        self.say(str(exc), 15_000)

    def detach(self) -> None:
        """Stop watching the attached server (it keeps running)."""
        if self.attached is None:
            return
        self.services.stop_metrics()
        url = self.attached.base_url
        self.attached = None
        self.api_key = None
        self.window.server_panel.show_state(None)
        self.window.server_panel.show_capacity(None, None)
        self.say(f"stopped watching {url}; it keeps running", 5000)
