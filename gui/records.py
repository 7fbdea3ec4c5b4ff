"""Plain records the panels display and the services fill (no Qt, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvpilot.gui import theme

if TYPE_CHECKING:
    from kvpilot.core.fit.plan import Capacity, PlanInputs
    from kvpilot.core.fit.recommend import Candidate, Rejection


@dataclass(frozen=True)
class Goal:
    """What the user asked for in the planner."""

    use_case: str = "chat"
    context_tokens: int = 8192
    users: int = 4
    allow_4bit: bool = True
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    enforce_eager: bool = False
    model_ref: str = ""
    vllm_version: str | None = None  # the installed vLLM's (None: the fit engine's default)
    #: LoRA adapters per batch (0: off) and their largest rank; a drafter ("": off, "ngram",
    #: "mtp") and its tokens per step (kvpilot.core.fit.adapters.adapter_settings)
    lora_slots: int = 0
    lora_rank: int = 16
    speculative_method: str = ""
    speculative_tokens: int = 2

    def adapter_settings(self) -> dict[str, Any]:
        """The serving settings of the LoRA and drafter inputs
        (:func:`kvpilot.core.fit.adapters.adapter_settings`)."""
        from kvpilot.core.fit.adapters import adapter_settings

        return adapter_settings(
            lora_slots=self.lora_slots, lora_rank=self.lora_rank,
            speculative_method=self.speculative_method,
            speculative_tokens=self.speculative_tokens,
        )


@dataclass(frozen=True)
class PlanRow:
    """One ranked plan as the table shows it.

    ``inputs``/``capacity`` are the fit engine's PlanInputs and Capacity; ``model_ref`` is what
    vLLM is given (a repo id or a local path); ``reason`` says why it does not fit or what to
    watch; ``tokens_per_s`` is the engine's estimate (None when it has none); ``tight`` is the
    fit engine's rule (:func:`kvpilot.core.fit.recommend.is_tight`), the CLI's too.
    """

    title: str
    quantization: str
    inputs: PlanInputs | None
    capacity: Capacity | None
    fits: bool
    reason: str
    model_ref: str
    tokens_per_s: float | None = None
    source: Candidate | Rejection | None = None
    tight: bool = False
    #: KV bytes left once the goal's users have theirs (what ``tight`` judges); None: no fit
    kv_headroom_bytes: int | None = None

    @property
    def borderline(self) -> bool:
        """The fit engine's verdict is "borderline": vLLM may or may not start this plan."""
        return not self.fits and self.capacity is not None and self.capacity.verdict == "borderline"

    @property
    def launchable(self) -> bool:
        """A plan that fits, or a borderline one (the user may try it; a failure is caught)."""
        return self.inputs is not None and (self.fits or self.borderline)

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
