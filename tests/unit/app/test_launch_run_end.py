"""Which supervisor events end a run: a face re-reads the run records on them (the record is
written first), and the launch session's listener hands them to the recorder before the face."""

from __future__ import annotations

from kvpilot.core.app.launch import _chain, run_ended
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.core.vllm.states import LogLineEvent, StateEvent


def _state(state: SupervisorState) -> StateEvent:
    return StateEvent(state, SupervisorState.STARTING, at_s=1.0, monotonic_s=1.0)


def test_a_stop_or_a_failure_ends_the_run_and_nothing_else_does() -> None:
    assert run_ended(_state(SupervisorState.STOPPED))
    assert run_ended(_state(SupervisorState.FAILED))
    assert not run_ended(_state(SupervisorState.READY))
    assert not run_ended(_state(SupervisorState.STOPPING))
    assert not run_ended(LogLineEvent("stdout", "INFO started", 1.0))
    assert not run_ended(None)


def test_the_recorder_hears_the_end_first_and_the_face_every_other_event_first() -> None:
    heard: list[tuple[str, object]] = []
    both = _chain(lambda ev: heard.append(("recorder", ev)),
                  lambda ev: heard.append(("face", ev)))
    line, end = LogLineEvent("stdout", "x", 1.0), _state(SupervisorState.STOPPED)
    both(line)
    both(end)
    assert heard == [("face", line), ("recorder", line), ("recorder", end), ("face", end)]
