"""The states of a supervised vLLM server and the events its supervisor reports, in a module
of their own so that a panel or a listener can name them without importing the supervisor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.lifecycle import SupervisorState

if TYPE_CHECKING:
    from kvpilot.core.base import failures
    from kvpilot.core.fit.measurements import ReportedCapacity


STARTING = SupervisorState.STARTING
READY = SupervisorState.READY
STOPPING = SupervisorState.STOPPING
STOPPED = SupervisorState.STOPPED
FAILED = SupervisorState.FAILED
TERMINAL_STATES = (STOPPED, FAILED)


@dataclass(frozen=True)
class StateEvent:
    """The supervisor entered ``state``.

    ``at_s`` is wall time (``time.time()``), ``monotonic_s`` the monotonic clock (for latency
    measurements); ``failure`` is set for ``failed``; ``phase`` is the last known start-up phase.
    """

    state: SupervisorState
    previous: SupervisorState | None
    at_s: float
    monotonic_s: float
    phase: str | None = None
    failure: failures.Failure | None = None
    returncode: int | None = None


@dataclass(frozen=True)
class LogLineEvent:
    """One line of vLLM output (API key redacted). ``stream`` is ``stdout`` or ``stderr``."""

    stream: str
    line: str
    at_s: float


@dataclass(frozen=True)
class CapacityUpdatedEvent:
    """The merged :class:`ReportedCapacity` changed (after a log line or a /metrics read)."""

    capacity: ReportedCapacity
    source: str


SupervisorEvent = Any  # StateEvent | LogLineEvent | CapacityUpdatedEvent | logparse events


def iter_states(events: list[SupervisorEvent]) -> Iterator[SupervisorState]:
    """The sequence of states in an event list."""
    for ev in events:
        if isinstance(ev, StateEvent):
            yield ev.state
