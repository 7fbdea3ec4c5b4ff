"""The planner's adapter inputs: LoRA slots and rank, a drafter and its tokens, as serving
settings and back.

Only the window's planner offers these inputs (``kvpilot plan`` and ``serve`` take the vLLM
flags themselves, :mod:`kvpilot.core.commands.serving_args`); what the settings cost is
:mod:`kvpilot.core.fit.adapters`'.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import DEFAULT_MAX_LORA_RANK, ServingSettings
from kvpilot.core.base.speculative_config import speculative_settings

#: the drafters the planner's inputs offer (the CLI takes any ``--speculative-config``)
PLANNER_DRAFTERS = ("ngram", "mtp")


def adapter_settings(
    *, lora_slots: int = 0, lora_rank: int = DEFAULT_MAX_LORA_RANK, speculative_method: str = "",
    speculative_tokens: int = 1,
) -> dict[str, Any]:
    """The :class:`~kvpilot.core.base.plan.ServingSettings` fields for the planner's adapter
    inputs: ``lora_slots`` adapters per batch (0: LoRA off) at ``lora_rank``, and a drafter
    (``""``: off; ``ngram``: prompt lookup up to 4 tokens; ``mtp``: the checkpoint's MTP
    layers) proposing ``speculative_tokens`` tokens per step.

    Raises:
        FitError: an unknown drafter or a count below 1.
    """
    values: dict[str, Any] = {}
    if lora_slots > 0:
        values.update(enable_lora=True, max_loras=lora_slots, max_lora_rank=lora_rank)
    method = speculative_method.strip().lower()
    if method:
        if method not in PLANNER_DRAFTERS:
            raise FitError(f"speculative method must be one of {', '.join(PLANNER_DRAFTERS)}, "
                           f"got {speculative_method!r}")
        if speculative_tokens < 1:
            raise FitError(f"draft tokens must be at least 1, got {speculative_tokens}")
        config: dict[str, Any] = {"method": method, "num_speculative_tokens": speculative_tokens}
        if method == "ngram":
            config["prompt_lookup_max"] = 4
        values["speculative_config"] = json.dumps(config)
    return values


@dataclass(frozen=True)
class PlannerAdapters:
    """The planner's adapter inputs for a set of serving settings: LoRA slots (0: off) and
    rank, the drafter ("" off, "ngram", "mtp") and its tokens; ``other_speculative_config`` a
    drafter the inputs do not offer (kept as it is, e.g. EAGLE-3 set on the command line)."""

    lora_slots: int = 0
    lora_rank: int = DEFAULT_MAX_LORA_RANK
    speculative_method: str = ""
    speculative_tokens: int = 2
    other_speculative_config: str | None = None


def planner_adapters(settings: ServingSettings) -> PlannerAdapters:
    """What the planner's adapter inputs show for ``settings`` (the inverse of
    :func:`adapter_settings`)."""
    slots = (settings.max_loras or 1) if settings.enable_lora else 0
    rank = settings.max_lora_rank or DEFAULT_MAX_LORA_RANK
    method, tokens, other = "", 2, None
    if settings.speculative_config:
        parsed = speculative_settings(settings.speculative_config)
        if parsed is not None and parsed.method in PLANNER_DRAFTERS:
            method, tokens = parsed.method, parsed.num_speculative_tokens or 1
        else:
            other = settings.speculative_config
    return PlannerAdapters(slots, rank, method, tokens, other)
