"""A server's lifecycle words: the start-up phase names (one table, in start order, that the log
scanner reports from) and the supervisor's states."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.core.base import lifecycle as phases
from kvpilot.core.vllm import logparse


def test_the_scanner_reports_phases_of_the_table_in_its_order() -> None:
    scanner = logparse.LogScanner()
    seen = []
    for line in (DATA / "vllm_logs" / "cpu_0.32" / "startup.log").read_text().splitlines():
        seen += [e.phase for e in scanner.feed(line) if isinstance(e, logparse.PhaseEvent)]
    assert seen == [phases.RESOLVING, phases.LOADING_WEIGHTS, phases.KV_CACHE_ALLOCATED,
                    phases.STARTING_API]
    assert seen == sorted(seen, key=phases.PHASES.index)
    assert logparse.PHASES is phases.PHASES  # re-exported, not a second table


def test_every_phase_has_words_for_the_user() -> None:
    """One table gives the order and the words; the GUI's progress line and ``kvpilot serve``
    both read it."""
    assert tuple(phases.PHASE_WORDS) == phases.PHASES
    assert all(words and words != name for name, words in phases.PHASE_WORDS.items())
    assert phases.phase_words(phases.CAPTURING_CUDA_GRAPHS) == "capturing CUDA graphs"
    assert phases.phase_words("warming_up") == "warming up"  # a name a later parser may add
    assert phases.phase_words(None) == ""


def test_the_supervisor_states_are_the_words_of_the_events() -> None:
    from kvpilot.core.vllm import states

    assert [str(s) for s in phases.SupervisorState] == [
        "starting", "ready", "stopping", "stopped", "failed"]
    assert states.TERMINAL_STATES == (phases.SupervisorState.STOPPED,
                                      phases.SupervisorState.FAILED)
