"""After a failure: what would fit instead, shown on the banner, relaunched in one click.

A failure (vLLM's, or the start-up refusal kvpilot makes before launching) goes to the launch
session's fallback step (:meth:`kvpilot.core.app.launch.LaunchSession.after_failure`, the one
``kvpilot serve`` takes) on the pool with the failed request; what it decides is rendered here:
a fallback the profile's policy takes by itself (as ``--auto-fallback``) is said and relaunched,
offered ones go to the banner with their predicted effect. A pressure
signal on the dashboard (KV full, requests waiting) relaunches the running plan with the fix
the core suggests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.core.app.launch import FallbacksOffered, FallbackTaken, fix_for_pressure
from kvpilot.gui.controllers.server import ServerAware
from kvpilot.gui.services import LaunchRequest

if TYPE_CHECKING:
    from kvpilot.core.app.launch import FallbackChoice, FallbackStep
    from kvpilot.core.base.failures import Failure

STOPPED_TITLE = "the server stopped:"


class FallbackController(ServerAware):
    """Owns the last failure and the options offered for it (``fallback_options``);
    ``proposing`` is True while the pool works them out."""

    last_failure: Failure | None = None
    fallback_options: tuple[FallbackChoice, ...] = ()
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
        if failure is None or inputs is None or request is None:
            self.proposing = False
            window.banner.show_failure(message, [])
            return
        self.proposing = True
        window.banner.show_failure(message, [], note="working out what would fit…")
        if after_ready:
            window.banner.set_title(STOPPED_TITLE)
        self.in_pool(
            lambda: self.services.after_failure(failure, request),
            lambda step: self._on_step(failure, step, after_ready),
            lambda exc: self._on_step(failure, FallbacksOffered(failure, ()), after_ready,
                                      str(exc)),
        )

    def _on_step(
        self, failure: Failure, step: FallbackStep, after_ready: bool, error: str = ""
    ) -> None:
        """Render the launch session's step: a fallback it takes by itself is said and
        relaunched; offered ones go to the banner."""
        if failure is not self.last_failure:
            return
        self.proposing = False
        if isinstance(step, FallbackTaken):
            self.fallback_options = ()
            self.say(f"{failure.kind}: fallback {step.attempt}/{step.max_attempts} taken "
                     f"automatically: {step.choice.description}", 15_000)
            self.apply_fallback(step.choice)
            return
        self.fallback_options = step.choices
        note = "" if step.choices else (
            error or "no automatic fallback for this failure; see the log")
        banner = self.window.banner
        banner.show_failure(str(getattr(failure, "message", failure)), list(step.choices),
                            note=note)
        if after_ready:
            banner.set_title(STOPPED_TITLE)

    def apply_fallback(self, choice: FallbackChoice) -> bool:
        """Relaunch with a fallback choice (one click on the banner, or the profile's
        automatic policy); a choice of another checkpoint launches that one."""
        req = self.server.current_request
        inputs = choice.inputs
        if req is None or inputs is None:
            return False
        model = str(choice.changes.get("model") or req.model)
        self.window.banner.setVisible(False)
        return self.server.relaunch(LaunchRequest(inputs=inputs, model=model, profile=req.profile))

    def apply_pressure_fix(self, kind: str) -> bool:
        """Relaunch the running plan with the fix a pressure signal suggests
        (:func:`kvpilot.core.app.launch.fix_for_pressure`)."""
        req = self.server.current_request
        if req is None:
            return False
        inputs = fix_for_pressure(kind, req.inputs, req.predicted)
        if inputs is None:
            return False
        return self.server.relaunch(
            LaunchRequest(inputs=inputs, model=req.model, profile=req.profile)
        )
