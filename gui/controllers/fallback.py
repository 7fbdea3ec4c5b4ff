"""After a failure: what would fit instead, shown on the banner, relaunched in one click.

A failure (vLLM's, or the start-up refusal kvpilot makes before launching) goes to the launch
session (:meth:`kvpilot.core.app.launch.LaunchSession.fallbacks`) on the pool with the failed
request; the banner shows the ranked choices with their predicted effect, or, when the profile
says so, the best one is taken by itself (as ``kvpilot serve --auto-fallback``). A pressure
signal on the dashboard (KV full, requests waiting) relaunches the running plan with the fix
the core suggests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.gui.controllers.server import ServerAware
from kvpilot.gui.services import LaunchRequest
from kvpilot.gui.workers import run_in_pool

if TYPE_CHECKING:
    from kvpilot.core.app.launch import FallbackChoice
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
        target = self.gpus.target
        free = target.free_bytes if target is not None else None
        run_in_pool(
            lambda: self.services.propose_fallbacks(failure, request, free),
            lambda options: self._on_fallbacks(failure, options, after_ready),
            lambda exc: self._on_fallbacks(failure, [], after_ready, str(exc)),
        )

    def _on_fallbacks(
        self,
        failure: Failure,
        options: list[FallbackChoice],
        after_ready: bool,
        error: str = "",
    ) -> None:
        if failure is not self.last_failure:
            return
        self.proposing = False
        self.fallback_options = tuple(options)
        automatic = self.services.automatic_fallback(options)
        if automatic is not None:
            session = self.services.session
            taken = session.fallbacks_taken if session is not None else 1
            limit = session.policy.max_attempts if session is not None else taken
            self.say(f"{failure.kind}: fallback {taken}/{limit} taken automatically: "
                     f"{automatic.description}", 15_000)
            self.apply_fallback(automatic)
            return
        note = "" if options else (error or "no automatic fallback for this failure; see the log")
        banner = self.window.banner
        banner.show_failure(str(getattr(failure, "message", failure)), options, note=note)
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
