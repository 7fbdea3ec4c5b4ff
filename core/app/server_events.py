"""What a face shows of a supervised server's events: each event read once into the news it
carries (an output line with its level, a start-up phase, a state change, new capacity figures).

The supervisor reports its events as :mod:`kvpilot.core.vllm.states` and
:mod:`kvpilot.core.vllm.logevents` records; a face asks :func:`server_news` what one of them
says and renders that, and :func:`leveled_lines` gives a batch of output lines their levels
(:func:`kvpilot.core.vllm.loglevel.line_level`, the levels ``kvpilot watch --log`` reads too).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvpilot.core.fit.measurements import ReportedCapacity
from kvpilot.core.vllm.logevents import PhaseEvent
from kvpilot.core.vllm.loglevel import line_level
from kvpilot.core.vllm.states import CapacityUpdatedEvent, LogLineEvent, StateEvent


@dataclass(frozen=True)
class ServerNews:
    """What one event says; at most one field is set (none: nothing a face shows).

    ``log``: an output line as (level, line); ``phase``: the start-up phase entered;
    ``state``: the state change; ``capacity``: the figures the server reported so far.
    """

    log: tuple[str, str] | None = None
    phase: str | None = None
    state: StateEvent | None = None
    capacity: ReportedCapacity | None = None


def server_news(ev: object) -> ServerNews:
    """The news of one supervisor event (any other object: none)."""
    if isinstance(ev, LogLineEvent):
        return ServerNews(log=(line_level(ev.line, ev.stream), ev.line))
    if isinstance(ev, PhaseEvent):
        return ServerNews(phase=ev.phase)
    if isinstance(ev, StateEvent):
        return ServerNews(state=ev)
    if isinstance(ev, CapacityUpdatedEvent):
        return ServerNews(capacity=ev.capacity)
    return ServerNews()


def leveled_lines(lines: Iterable[LogLineEvent]) -> list[tuple[str, str]]:
    """Each output line as (level, line), in order."""
    return [(line_level(ev.line, ev.stream), ev.line) for ev in lines]
