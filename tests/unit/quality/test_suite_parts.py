"""The suite's parts: the server streams are balanced, whole and on ports of their own."""

from __future__ import annotations

import json

import pytest
from conftest import SAME_STREAM, STREAM_SECONDS, UNTIMED_MODULE_S, split_streams
from ports import PORT_OFFSET_ENV, free_port
from testpaths import REPO


def _recorded() -> dict[str, float]:
    return json.loads(STREAM_SECONDS.read_text(encoding="utf-8"))["module_seconds"]


def test_every_recorded_module_still_exists() -> None:
    """A module renamed or removed since the recording would be balanced as a stranger."""
    missing = [m for m in _recorded() if not (REPO / m).is_file()]
    assert not missing, (
        f"re-record tests/server_streams.json (scripts/record_server_streams.py): {missing}")


def test_two_streams_take_every_module_once_and_differ_by_less_than_the_longest() -> None:
    seconds = _recorded()
    chosen = split_streams(list(seconds), seconds, 2)
    assert set(chosen) == set(seconds) and set(chosen.values()) == {0, 1}
    loads = [sum(s for m, s in seconds.items() if chosen[m] == k) for k in (0, 1)]
    assert abs(loads[0] - loads[1]) <= max(seconds.values())


def test_a_module_nobody_timed_counts_as_one_vllm_start_and_the_split_is_stable() -> None:
    seconds = {"a.py": 100.0, "b.py": UNTIMED_MODULE_S + 10}
    chosen = split_streams(["b.py", "a.py", "new.py", "new.py"], seconds, 2)
    assert chosen == {"a.py": 0, "b.py": 1, "new.py": 1}
    assert split_streams(["new.py", "b.py", "a.py"], seconds, 2) == chosen


def test_each_stream_finds_its_ports_in_a_block_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PORT_OFFSET_ENV, "0")
    first = free_port(18000)
    monkeypatch.setenv(PORT_OFFSET_ENV, "3000")
    second = free_port(18000)
    assert 18000 <= first < 18050 and 21000 <= second < 21050


def test_the_modules_that_start_fronts_share_one_stream() -> None:
    seconds = _recorded()
    chosen = split_streams(list(seconds) + list(SAME_STREAM), seconds, 2)
    assert len({chosen[m] for m in SAME_STREAM}) == 1
    assert all((REPO / m).is_file() for m in SAME_STREAM)
