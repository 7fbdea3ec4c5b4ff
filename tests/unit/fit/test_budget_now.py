"""The launch budget reproduces vLLM's start-up check: free >= ceil(total x utilization)."""

from __future__ import annotations

import math
import random

import pytest

from kvpilot.core.base.errors import FitError
from kvpilot.core.fit.budget_now import (
    CUDA_CONTEXT_BYTES,
    DEFAULT_MARGIN_BYTES,
    SAFETY_BYTES,
    GpuMemoryNow,
    launch_budget,
    max_startup_utilization,
    passes_startup_check,
    requested_bytes,
)

MiB = 1024**2
GiB = 1024**3


def test_check_is_vllms_rule() -> None:
    total = 25_393_692_672  # an RTX 4090 as CUDA counts it
    need = math.ceil(total * 0.9)
    assert requested_bytes(total, 0.9) == need
    assert passes_startup_check(total, need, 0.9)
    assert not passes_startup_check(total, need - 1, 0.9)


def test_margin_is_explicit_and_documented() -> None:
    assert DEFAULT_MARGIN_BYTES == CUDA_CONTEXT_BYTES + SAFETY_BYTES
    assert 300 * MiB <= CUDA_CONTEXT_BYTES <= 512 * MiB  # vLLM's context on a 4090: 0.3-0.5 GiB


def test_rounds_down_to_hundredths_and_respects_margin() -> None:
    total = 24_218 * MiB
    free = 22_682 * MiB
    util = max_startup_utilization(total, free)
    assert util == 0.91
    assert passes_startup_check(total, free - DEFAULT_MARGIN_BYTES, util)
    assert not passes_startup_check(total, free - DEFAULT_MARGIN_BYTES, util + 0.01)
    assert max_startup_utilization(total, free, margin_bytes=0) == 0.93
    assert max_startup_utilization(total, free, margin_bytes=4 * GiB) == 0.76


def test_randomized_result_is_maximal_and_passes() -> None:
    rng = random.Random(1234)
    for _ in range(2000):
        total = rng.randint(4 * GiB, 96 * GiB)
        free = rng.randint(0, total)
        margin = rng.randint(0, 2 * GiB)
        util = max_startup_utilization(total, free, margin)
        assert util == round(util, 2)
        usable = free - margin
        if util > 0:
            assert passes_startup_check(total, usable, util)
        nxt = round(util + 0.01, 2)
        if nxt <= 1.0:
            assert not passes_startup_check(total, usable, nxt)


def test_nothing_free_gives_zero() -> None:
    assert max_startup_utilization(24 * GiB, 500 * MiB) == 0.0
    assert max_startup_utilization(24 * GiB, 0, margin_bytes=0) == 0.0
    assert max_startup_utilization(24 * GiB, 24 * GiB, margin_bytes=0) == 1.0


@pytest.mark.parametrize(
    ("total", "free", "margin"), [(0, 1, 0), (-1, 1, 0), (10, -1, 0), (10, 5, -1)]
)
def test_bad_input_is_a_typed_error(total: int, free: int, margin: int) -> None:
    with pytest.raises(FitError, match="must"):
        max_startup_utilization(total, free, margin)


def test_desktop_reading_names_what_others_hold() -> None:
    total, free = 24_218 * MiB, 22_682 * MiB
    budget = launch_budget(
        GpuMemoryNow(1, total, free, (("firefox", 1024 * MiB),), 2, per_process_reported=True)
    )
    assert budget is not None
    assert (budget.gpu_index, budget.others_bytes, budget.max_utilization) == (1, 1536 * MiB, 0.91)
    assert budget.message == (
        "other processes hold 1.5 GiB: at most gpu_memory_utilization 0.91 will start"
    )
    assert budget.requested_bytes <= budget.free_bytes - budget.margin_bytes


def test_idle_reading_and_unreported_processes() -> None:
    idle = launch_budget(GpuMemoryNow(0, 24 * GiB, 24 * GiB - 32 * MiB))
    assert idle is not None and idle.message.startswith("24.0 GiB free: at most")
    # a process is listed but its memory is not reported (WSL2): not idle, and said so
    wsl = launch_budget(GpuMemoryNow(0, 24 * GiB, 24 * GiB - 32 * MiB, (), 1, False))
    assert wsl is not None and "not reported" in wsl.message


def test_full_reading_says_cannot_start() -> None:
    budget = launch_budget(GpuMemoryNow(0, 24 * GiB, 300 * MiB))
    assert budget is not None and budget.max_utilization == 0.0
    assert "cannot start" in budget.message and "GPU 0" in budget.message


def test_unknown_memory_gives_no_budget() -> None:
    assert launch_budget(GpuMemoryNow(0, None, None)) is None
    assert launch_budget(GpuMemoryNow(0, 1, 1, lost=True)) is None
    assert launch_budget(GpuMemoryNow(0, 0, 0)) is None
