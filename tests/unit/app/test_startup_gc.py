"""The cyclic collector is off while the app starts, and the start-up's objects are frozen
afterwards, so that later full collections do not walk them."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest

from kvpilot.core.app import startup_gc


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    was_enabled = gc.isenabled()
    yield
    startup_gc.settle_after_start()
    gc.unfreeze()
    if was_enabled:
        gc.enable()
    else:
        gc.disable()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_held_start_then_frozen_objects_and_a_collector_that_runs_again() -> None:
    gc.enable()
    assert startup_gc.hold_during_start()
    assert not gc.isenabled() and startup_gc.holding()
    # cycles made during the start wait; objects alive at the end are what gets frozen
    survivors = [{"n": i} for i in range(20_000)]
    gc.collect()  # an explicit collection still works, as before
    time.sleep(0.01)
    settled = startup_gc.settle_after_start()
    assert settled is not None
    assert gc.isenabled() and not startup_gc.holding()
    assert settled.held_s >= 0.01
    assert settled.frozen_objects >= len(survivors)
    # garbage made after the start is collected as before
    _Cycle()
    assert gc.collect() >= 1
    assert startup_gc.settle_after_start() is None  # once only


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    gc.disable()
    assert not startup_gc.hold_during_start()
    assert not startup_gc.holding()
    assert startup_gc.settle_after_start() is None
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_holding_twice_is_one_hold() -> None:
    gc.enable()
    assert startup_gc.hold_during_start()
    assert not startup_gc.hold_during_start()
    assert startup_gc.settle_after_start() is not None
    assert startup_gc.settle_after_start() is None
    assert gc.isenabled()


def test_full_collections_after_the_start_skip_the_frozen_objects() -> None:
    gc.enable()
    startup_gc.hold_during_start()
    kept = [[i] for i in range(50_000)]  # a start-up's worth of tracked objects
    assert any(o is kept[0] for o in gc.get_objects())  # in a generation the collector walks
    settled = startup_gc.settle_after_start()
    assert settled is not None and settled.frozen_objects >= len(kept)
    # the permanent generation is not part of any collection (gc.get_objects lists what is)
    assert not any(o is kept[0] or o is kept[-1] for o in gc.get_objects())
    assert kept[-1] == [49_999]
