"""Each supervisor event read once into what a face shows: a recorded vLLM 0.32 (CPU) output
line with its level, a start-up phase, a state change, reported capacity, and nothing for
anything else."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.core.app.server_events import leveled_lines, server_news
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.core.fit.measurements import ReportedCapacity
from kvpilot.core.vllm.logevents import PhaseEvent
from kvpilot.core.vllm.states import CapacityUpdatedEvent, LogLineEvent, StateEvent

LOG = DATA / "vllm_logs" / "cpu_0.32" / "startup.log"


def test_each_event_says_one_thing() -> None:
    line = next(t for t in LOG.read_text(encoding="utf-8").splitlines() if "version 0.32.0" in t)
    assert server_news(LogLineEvent("stderr", line, 1.0)).log == ("INFO", line)
    assert leveled_lines([LogLineEvent("stdout", line, 1.0)]) == [("INFO", line)]
    assert server_news(PhaseEvent("loading_weights", line)).phase == "loading_weights"
    state = StateEvent(SupervisorState.READY, SupervisorState.STARTING, 2.0, 2.0)
    news = server_news(state)
    assert news.state is state and news.log is None and news.phase is None
    capacity = ReportedCapacity(kv_cache_tokens=52_416, sources=("log",))
    assert server_news(CapacityUpdatedEvent(capacity, "log")).capacity == capacity
    assert server_news("something else") == server_news(None)
    assert server_news(None).state is None and server_news(None).capacity is None
