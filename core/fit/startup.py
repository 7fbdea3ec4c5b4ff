"""vLLM's start-up check, made again with the free memory of the moment of launch.

A plan is made with the free memory NVML reported when it was planned; on a desktop that changes
before the launch (a browser opens a tab, a game starts). vLLM refuses to start when the free
memory is below ``total x gpu_memory_utilization`` (see :mod:`kvpilot.core.fit.budget`), so the
launch re-reads the free memory and the processes holding it and plans once more: a refusal names
the programs to close and carries the plan with the fresh reading, from which the fallbacks
(a utilization that fits) are proposed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.fit.budget import compute_capacity


@dataclass(frozen=True)
class StartupRefusal:
    """vLLM would refuse to start: ``failure`` says why, ``inputs`` is the plan with the free
    memory and memory holders read at launch."""

    failure: Failure
    inputs: PlanInputs


def startup_refusal(
    inputs: PlanInputs, free_bytes: int, holders: tuple[tuple[str, int], ...] = ()
) -> StartupRefusal | None:
    """The refusal of ``inputs`` with ``free_bytes`` free now (bytes) and ``holders`` (name,
    bytes) holding memory, or None when vLLM's free-memory check would pass.

    Raises:
        FitError: inputs that make no sense (see :func:`compute_capacity`).
    """
    now = replace(inputs, gpu_free_bytes=free_bytes, gpu_memory_holders=holders)
    cap = compute_capacity(now)
    if cap.failure is not None and cap.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION:
        return StartupRefusal(cap.failure, now)
    return None
