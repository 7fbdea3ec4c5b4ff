"""Plain records the panels display and the services fill (no Qt, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings
from kvpilot.gui import theme

if TYPE_CHECKING:
    from kvpilot.core.app.recommend import RankedPlan
    from kvpilot.core.base.plan import Capacity, PlanInputs
    from kvpilot.core.fit.recommend import Candidate, Rejection


@dataclass(frozen=True)
class PlanRequest:
    """What the planner is asked: the user's :class:`~kvpilot.core.base.goal.Goal`, the serving
    settings the user fixed (``"auto"``/None/False: the recommender chooses) and the model
    (a catalog id, a Hub repo id or a local path; "" = rank the catalog). A profile stores all
    three (``goal``, ``plan``, ``model_ref``)."""

    goal: Goal = field(default_factory=Goal)
    pinned: ServingSettings = field(default_factory=ServingSettings)
    model_ref: str = ""


@dataclass(frozen=True)
class PlanRow:
    """One ranked plan as the table shows it: the application layer's :class:`RankedPlan` and its
    display.

    ``title`` is the row's text (the model, and the cards used on several GPUs);
    ``quantization`` the checkpoint's label; ``model_ref`` what vLLM is given (a repo id or a
    local path). Everything else is the ranked plan's, read through the properties below.
    """

    plan: RankedPlan
    title: str
    quantization: str
    model_ref: str

    @property
    def inputs(self) -> PlanInputs | None:
        return self.plan.inputs

    @property
    def capacity(self) -> Capacity | None:
        return self.plan.capacity

    @property
    def fits(self) -> bool:
        return self.plan.fits

    @property
    def reason(self) -> str:
        """Why it does not fit, or what to watch."""
        return self.plan.reason

    @property
    def tight(self) -> bool:
        """The fit engine's rule (:func:`kvpilot.core.fit.recommend.is_tight`), the CLI's too."""
        return self.plan.tight

    @property
    def kv_headroom_bytes(self) -> int | None:
        """KV bytes left once the goal's users have theirs (what ``tight`` judges)."""
        return self.plan.kv_headroom_bytes

    @property
    def source(self) -> Candidate | Rejection | None:
        """The recommender's own record of this plan."""
        return self.plan.candidate or self.plan.rejection

    @property
    def tokens_per_s(self) -> float | None:
        """The engine's decode estimate (None when it has none)."""
        cand = self.plan.candidate
        return cand.decode_tokens_per_s if cand is not None else None

    @property
    def borderline(self) -> bool:
        """The fit engine's verdict is "borderline": vLLM may or may not start this plan."""
        return self.plan.borderline

    @property
    def launchable(self) -> bool:
        """A plan that fits, or a borderline one (the user may try it; a failure is caught)."""
        return self.plan.launchable

    @property
    def status_color(self) -> str:
        if self.borderline:
            return theme.TIGHT
        if not self.fits:
            return theme.FAIL
        return theme.TIGHT if self.tight else theme.OK


@dataclass(frozen=True)
class PlanResult:
    """Rows for the plans table and its heading."""

    rows: list[PlanRow]
    heading: str
