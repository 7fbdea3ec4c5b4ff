"""The launch budget reproduces vLLM's start-up check: free >= ceil(total x utilization)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from kvpilot.core.errors import FitError
from kvpilot.core.hardware.budget_now import (
    CUDA_CONTEXT_BYTES,
    DEFAULT_MARGIN_BYTES,
    SAFETY_BYTES,
    launch_budget,
    max_startup_utilization,
    passes_startup_check,
    requested_bytes,
)
from kvpilot.core.hardware.fake_nvml import FakeNvml
from kvpilot.core.hardware.probe import GpuSnapshot, probe
from kvpilot.core.hardware.system import SystemSnapshot

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


def _gpu(fake: Callable[[str], FakeNvml], system: SystemSnapshot, name: str) -> GpuSnapshot:
    return probe(fake(name), system=system).gpus[0]


def test_4090_desktop_budget(fake: Callable[[str], FakeNvml], system: SystemSnapshot) -> None:
    gpu = _gpu(fake, system, "rtx4090-desktop")
    budget = launch_budget(gpu)
    assert budget is not None
    assert budget.total_bytes == gpu.cuda_total_bytes == (24564 - 346) * MiB
    assert budget.free_bytes == gpu.memory_free_bytes
    assert budget.others_bytes == 1536 * MiB
    assert budget.max_utilization == 0.91
    assert (
        budget.message
        == "other processes hold 1.5 GiB: at most gpu_memory_utilization 0.91 will start"
    )
    assert budget.requested_bytes <= budget.free_bytes - budget.margin_bytes


def test_wsl2_budget_says_per_process_is_not_reported(
    fake: Callable[[str], FakeNvml], system: SystemSnapshot
) -> None:
    budget = launch_budget(_gpu(fake, system, "rtx4090-wsl2"))
    assert budget is not None and budget.per_process_reported is False
    assert "not reported" in budget.message
    assert budget.max_utilization == 0.89


def test_idle_gpu_message(fake: Callable[[str], FakeNvml], system: SystemSnapshot) -> None:
    budget = launch_budget(_gpu(fake, system, "rtx3090-idle"))
    assert budget is not None
    assert budget.message.startswith("23.6 GiB free: at most gpu_memory_utilization 0.97")


def test_full_gpu_says_cannot_start() -> None:
    gpu = GpuSnapshot(
        index=0,
        memory_total_bytes=24 * GiB,
        memory_reserved_bytes=0,
        memory_used_bytes=23 * GiB + 700 * MiB,
        memory_free_bytes=300 * MiB,
    )
    budget = launch_budget(gpu)
    assert budget is not None and budget.max_utilization == 0.0
    assert "cannot start" in budget.message


def test_unknown_memory_gives_no_budget() -> None:
    assert launch_budget(GpuSnapshot(index=0)) is None
    assert (
        launch_budget(GpuSnapshot(index=0, memory_total_bytes=1, memory_free_bytes=1, lost=True))
        is None
    )
