"""After a failure: what would fit instead, shown on the banner, relaunched in one click.

A failure (vLLM's, or the start-up refusal kvpilot makes before launching) goes to
:func:`kvpilot.core.fit.fallback.propose` on the pool with the failed plan; the banner shows the
options with their predicted effect. A pressure signal on the dashboard (KV full, requests
waiting) relaunches the running plan with the fix the core suggests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.gui.controllers.server import ServerAware
from kvpilot.gui.fallback import FallbackChoice
from kvpilot.gui.services import LaunchRequest
from kvpilot.gui.workers import run_in_pool

if TYPE_CHECKING:
    from kvpilot.core.failures import Failure
    from kvpilot.core.fit.fallback import FallbackOption

STOPPED_TITLE = "the server stopped:"


def option_tooltip(option: FallbackOption) -> str:
    """What differs from the failed plan, and a warning when it is predicted not to fit."""
    if option.predicted_fits:
        return option.change
    return f"{option.change} (predicted not to fit either)"


class FallbackController(ServerAware):
    """Owns the last failure and the options offered for it (``fallback_options``);
    ``proposing`` is True while the pool works them out."""

    last_failure: Failure | None = None
    fallback_options: tuple[FallbackOption, ...] = ()
    proposing: bool = False

    def reset(self) -> None:
        """A new launch: the last failure is over."""
        self.last_failure = None
        self.proposing = False

    def on_failure(self, failure: Failure | None, after_ready: bool) -> None:
        """Show ``failure`` and work out, on the pool, what would fit instead."""
        window = self.window
        self.last_failure = failure
        message = getattr(failure, "message", None) or "vLLM stopped without saying why"
        request = self.server.current_request
        inputs = request.inputs if request is not None else None
        if failure is None or inputs is None:
            self.proposing = False
            window.banner.show_failure(message, [])
            return
        self.proposing = True
        window.banner.show_failure(message, [], note="working out what would fit…")
        if after_ready:
            window.banner.set_title(STOPPED_TITLE)
        target = self.gpus.target
        free = target.free_bytes if target is not None else None
        run_in_pool(
            lambda: self.services.propose_fallbacks(failure, inputs, free),
            lambda options: self._on_fallbacks(failure, options, after_ready),
            lambda exc: self._on_fallbacks(failure, [], after_ready, str(exc)),
        )

    def _on_fallbacks(
        self,
        failure: Failure,
        options: list[FallbackOption],
        after_ready: bool,
        error: str = "",
    ) -> None:
        if failure is not self.last_failure:
            return
        self.proposing = False
        self.fallback_options = tuple(options)
        choices = [
            FallbackChoice(label=o.label, tooltip=option_tooltip(o), payload=o) for o in options
        ]
        note = "" if choices else (error or "no automatic fallback for this failure; see the log")
        banner = self.window.banner
        banner.show_failure(str(getattr(failure, "message", failure)), choices, note=note)
        if after_ready:
            banner.set_title(STOPPED_TITLE)

    def apply_fallback(self, option: object) -> bool:
        """Relaunch with a fallback option's plan inputs (one click on the banner)."""
        req = self.server.current_request
        inputs = getattr(option, "inputs", None)
        if req is None or inputs is None:
            return False
        model = req.model
        if getattr(inputs.model, "model_id", None) != getattr(req.inputs.model, "model_id", None):
            model = inputs.model.model_id  # a smaller checkpoint of the same family
        self.window.banner.setVisible(False)
        return self.server.relaunch(LaunchRequest(inputs=inputs, model=model, profile=req.profile))

    def apply_pressure_fix(self, kind: str) -> bool:
        """Relaunch the running plan with the fix a pressure signal suggests."""
        req = self.server.current_request
        if req is None:
            return False
        from kvpilot.core.fit.fallback import fix_for_pressure

        inputs = fix_for_pressure(kind, req.inputs, req.predicted)
        if inputs is None:
            return False
        return self.server.relaunch(
            LaunchRequest(inputs=inputs, model=req.model, profile=req.profile)
        )
