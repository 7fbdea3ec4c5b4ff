"""The one orphan policy both faces launch by: launch, stop first, launch beside on a port the
orphans do not hold, or refuse with the face's way out. Ports are answered by stand-in
``port_free`` / ``first_free`` functions (which port the OS has free is not the question)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.core.app.orphan_policy import (
    BESIDE,
    COMMAND_LINE_WORDS,
    LAUNCH,
    REFUSE,
    STOP_FIRST,
    WINDOW_WORDS,
    decide_orphans,
    found_sentence,
)
from kvpilot.core.vllm.orphans import OrphanServer, ServerRecord


def _orphan(port: int, pid: int = 4242) -> OrphanServer:
    record = ServerRecord(pid=pid, pgid=pid, port=port, host="127.0.0.1", model="/models/tiny",
                          served_model_name="tiny", started_at=0.0, log_path="",
                          argv=("vllm", "serve", "/models/tiny"), create_time=0.0,
                          owner_pid=1, owner_create_time=0.0)
    return OrphanServer(record, Path(f"/nonexistent/{port}.json"), True, (pid,))


def _decide(orphans: list[OrphanServer], port: int | None, *, stop: bool = False,
            busy: frozenset[int] = frozenset(), words=COMMAND_LINE_WORDS):
    def first_free(_host: str, start: int) -> int:
        return next(p for p in range(start, start + 100) if p not in busy)

    return decide_orphans(orphans, host="127.0.0.1", port=port, stop=stop, words=words,
                          port_free=lambda _h, p: p not in busy, first_free=first_free)


def test_without_orphans_the_launch_takes_the_port_asked_or_the_first_free() -> None:
    assert (_decide([], 8123).action, _decide([], 8123).port) == (LAUNCH, 8123)
    free = _decide([], None, busy=frozenset({8000}))
    assert (free.action, free.port, free.sentence) == (LAUNCH, 8001, "")


def test_an_orphan_on_the_port_asked_for_is_refused_in_each_faces_words() -> None:
    held = [_orphan(8000)]
    cli = _decide(held, 8000)
    window = _decide(held, 8000, words=WINDOW_WORDS)
    assert cli.refused and window.refused and cli.port is None
    head = ("port 8000 belongs to a vLLM server an earlier kvpilot left running "
            "(pid 4242, /models/tiny); ")
    assert cli.sentence == head + "pass --stop-orphans to stop it first, or pick another --port"
    assert window.sentence.startswith(head) and "profile" in window.sentence
    # held even when nothing listens yet (still loading): the port itself is not asked
    assert _decide(held, 8000, busy=frozenset()).action == REFUSE


def test_another_program_on_the_port_asked_for_is_refused() -> None:
    busy = _decide([], 8000, busy=frozenset({8000}))
    assert busy.refused
    assert busy.sentence == ("port 8000 on 127.0.0.1 is already in use; stop what listens there "
                             "or pick another --port")


def test_orphans_elsewhere_are_launched_beside_on_a_port_none_of_them_holds() -> None:
    orphans = [_orphan(8000, 1), _orphan(8001, 2)]
    any_port = _decide(orphans, None)
    assert (any_port.action, any_port.port) == (BESIDE, 8002)
    assert "beside 2 servers" in any_port.sentence and "port 8002" in any_port.sentence
    asked = _decide(orphans, 9000)
    assert (asked.action, asked.port, asked.orphans) == (BESIDE, 9000, tuple(orphans))


def test_stop_first_is_decided_before_any_port() -> None:
    orphans = [_orphan(8000)]
    first = _decide(orphans, 8000, stop=True)
    assert (first.action, first.port) == (STOP_FIRST, None)
    assert not first.refused
    assert _decide([], 8000, stop=True).action == LAUNCH  # none found: nothing to stop


@pytest.mark.parametrize("port", [8000, 9000])
def test_each_orphan_is_named_with_pid_port_and_model(port: int) -> None:
    assert found_sentence(_orphan(port)) == (
        f"found a server left by an earlier kvpilot: pid 4242 on port {port} (/models/tiny)")
