"""The window's launch refuses what vLLM's free-memory check would refuse with the memory free
right now, and carries the plan made with that reading."""

from __future__ import annotations

from pathlib import Path

import pytest
from fitkit import rtx4090

from kvpilot.core.app.launch import LaunchSession, StartupRefusedError
from kvpilot.core.base import failures
from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.runtimes.discovery import VllmRuntime

RUNTIME = VllmRuntime(("vllm",), "0.33.0", "path", "vllm")
TOTAL = 24564 << 20


def _session(tmp_path: Path, free_now: int) -> LaunchSession:
    return LaunchSession(RUNTIME, tmp_path, record_runs=False,
                         free_memory_now=lambda: (free_now, (("firefox", 2 * GiB),)))


def test_a_start_that_would_fail_is_refused_with_the_fresh_plan(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.9)
    with pytest.raises(StartupRefusedError, match="would start") as caught:
        _session(tmp_path, 4 * GiB).refuse_a_failing_start(inputs)
    err = caught.value
    assert isinstance(err, KvpilotError)
    assert err.refusal.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    assert str(err) == err.refusal.failure.message
    assert err.refusal.inputs.gpu_free_bytes == 4 * GiB
    assert err.refusal.inputs.gpu_memory_holders == (("firefox", 2 * GiB),)


def test_a_start_with_enough_free_memory_or_no_plan_goes_ahead(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.9)
    session = _session(tmp_path, TOTAL)
    session.refuse_a_failing_start(inputs)  # nothing raised: the check passes
    session.refuse_a_failing_start(None)  # no plan: nothing to check
    assert session.startup_check(inputs) is None
