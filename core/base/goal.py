"""What the user wants from a deployment: the recommender's goal, and how a context is written.

:class:`Goal` is the one goal type: ``kvpilot recommend`` builds it from its flags, the planner
panel from its inputs, and a settings profile stores it (:mod:`kvpilot.core.app.settings`).
:func:`parse_context_tokens` reads a context as people write it ("8192", "32,768", "32k") for
both faces.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import USE_CASES
from kvpilot.core.base.versions import NEWEST_KNOWN

#: a goal's context (tokens) when nothing else is asked for
DEFAULT_CONTEXT_TOKENS = 8192
#: the context a use case starts from when none is given (the window's use-case buttons set it;
#: ``kvpilot recommend --use-case`` without ``--context`` uses it): long documents need room for
#: the document, 32,768 tokens
USE_CASE_CONTEXT_TOKENS: dict[str, int] = {"chat": DEFAULT_CONTEXT_TOKENS, "long-docs": 32768,
                                           "batch": DEFAULT_CONTEXT_TOKENS}
#: concurrent users when nothing else is asked for
DEFAULT_USERS = 4
#: the shortest and longest context a goal may ask for (tokens)
MIN_CONTEXT_TOKENS = 16
MAX_CONTEXT_TOKENS = 16 * 1024 * 1024
#: the weight precisions a goal's quality floor may name (bits; 16 = no quantization)
WEIGHT_BITS_FLOORS = (4, 8, 16)


@dataclass(frozen=True)
class Goal:
    """What the user wants: use case, context per request, concurrent users, quality floor.

    ``context_tokens`` is the context of one request (tokens), ``users`` the requests served at
    once; ``min_weight_bits`` 16 means "no quantization", 8 "no 4-bit", 4 anything.
    ``vllm_version`` is the release planned for and ``model_filter`` a part of the model ids to
    keep; both are set where the goal is planned (the installed runtime, the chosen model), and
    a profile does not store them.
    """

    use_case: str = "chat"
    context_tokens: int = DEFAULT_CONTEXT_TOKENS
    users: int = DEFAULT_USERS
    min_weight_bits: int = 4
    vllm_version: str = NEWEST_KNOWN
    model_filter: str | None = None

    @property
    def allows_4bit(self) -> bool:
        """4-bit checkpoints may serve this goal."""
        return self.min_weight_bits <= 4

    def problems(self) -> list[str]:
        """What is wrong with this goal, one sentence each naming the fix ([] = usable)."""
        out: list[str] = []
        if self.use_case not in USE_CASES:
            out.append(f"use case '{self.use_case}' is unknown; use one of {', '.join(USE_CASES)}")
        if not MIN_CONTEXT_TOKENS <= self.context_tokens <= MAX_CONTEXT_TOKENS:
            out.append(f"context {self.context_tokens:,} tokens is out of range; use "
                       f"{MIN_CONTEXT_TOKENS} to {MAX_CONTEXT_TOKENS:,}")
        if self.users < 1:
            out.append(f"users {self.users} must be at least 1")
        if self.min_weight_bits not in WEIGHT_BITS_FLOORS:
            out.append(f"quality floor {self.min_weight_bits} bits is unknown; use one of "
                       f"{', '.join(map(str, WEIGHT_BITS_FLOORS))}")
        return out


def min_weight_bits_for(allow_4bit: bool) -> int:
    """The quality floor of a "4-bit allowed" choice (the planner's checkbox, ``--no-4bit``)."""
    return 4 if allow_4bit else 8


def parse_context_tokens(text: str) -> int:
    """A context length in tokens from ``8192``, ``32,768``, ``32_768``, ``32k`` or ``1.5K``.

    A ``k``/``K`` suffix is 1,024 tokens: the window writes 32,768 tokens as "32k". (vLLM's own
    ``--max-model-len 32k`` means 32,000; kvpilot always hands vLLM the whole number.)

    Raises:
        FitError: not a number of tokens from :data:`MIN_CONTEXT_TOKENS` to
            :data:`MAX_CONTEXT_TOKENS`; the message names the text and gives an example.
    """
    raw = text.replace(",", "").replace("_", "").strip()
    try:
        value = float(raw[:-1]) * 1024 if raw[-1:] in ("k", "K") else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not MIN_CONTEXT_TOKENS <= value <= MAX_CONTEXT_TOKENS:
        raise FitError(
            f"context {text.strip()[:40]!r} is not a number of tokens from {MIN_CONTEXT_TOKENS} "
            f"to {MAX_CONTEXT_TOKENS:,} (e.g. 8192 or 32k)"
        )
    return int(value)
