"""The states of a supervised vLLM server, in a module of their own so that a panel can name
them without importing the supervisor."""

from __future__ import annotations

from enum import StrEnum


class SupervisorState(StrEnum):
    """Where a supervised server is (:attr:`Supervisor.state`, ``StateEvent.state``)."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


STARTING = SupervisorState.STARTING
READY = SupervisorState.READY
STOPPING = SupervisorState.STOPPING
STOPPED = SupervisorState.STOPPED
FAILED = SupervisorState.FAILED
TERMINAL_STATES = (STOPPED, FAILED)
