"""A probed GPU as the plain memory reading the launch budget takes (recorded NVML snapshots)."""

from __future__ import annotations

from collections.abc import Callable

from kvpilot.core.fit.budget_now import launch_budget
from kvpilot.core.hardware.probe import GpuProcess, GpuSnapshot, memory_holders, memory_now, probe
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.system import SystemSnapshot

MiB = 1024**2
GiB = 1024**3


def _gpu(fake: Callable[[str], RecordedNvml], system: SystemSnapshot, name: str) -> GpuSnapshot:
    return probe(fake(name), system=system).gpus[0]


def test_4090_desktop_budget(fake: Callable[[str], RecordedNvml], system: SystemSnapshot) -> None:
    gpu = _gpu(fake, system, "rtx4090-desktop")
    budget = launch_budget(memory_now(gpu))
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
    fake: Callable[[str], RecordedNvml], system: SystemSnapshot
) -> None:
    budget = launch_budget(memory_now(_gpu(fake, system, "rtx4090-wsl2")))
    assert budget is not None and budget.per_process_reported is False
    assert "not reported" in budget.message
    assert budget.max_utilization == 0.89


def test_idle_gpu_message(fake: Callable[[str], RecordedNvml], system: SystemSnapshot) -> None:
    budget = launch_budget(memory_now(_gpu(fake, system, "rtx3090-idle")))
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
    budget = launch_budget(memory_now(gpu))
    assert budget is not None and budget.max_utilization == 0.0
    assert "cannot start" in budget.message


def test_unknown_memory_gives_no_budget() -> None:
    assert launch_budget(memory_now(GpuSnapshot(index=0))) is None
    assert (
        launch_budget(
            memory_now(GpuSnapshot(index=0, memory_total_bytes=1, memory_free_bytes=1, lost=True))
        )
        is None
    )


def test_reading_carries_the_holders_largest_first() -> None:
    gpu = GpuSnapshot(
        index=2,
        memory_total_bytes=24 * GiB,
        memory_reserved_bytes=300 * MiB,
        memory_free_bytes=20 * GiB,
        processes=(
            GpuProcess(10, "Xorg", (), 200 * MiB, "graphics"),
            GpuProcess(11, None, (), 900 * MiB, "compute"),
            GpuProcess(12, "wsl-thing", (), None, "compute"),
        ),
    )
    now = memory_now(gpu)
    assert (now.gpu_index, now.total_bytes, now.free_bytes) == (2, 24 * GiB - 300 * MiB, 20 * GiB)
    assert now.holders == (("pid 11", 900 * MiB), ("Xorg", 200 * MiB))
    assert (now.process_count, now.per_process_reported, now.lost) == (3, True, False)
    assert memory_holders(gpu, exclude_pids=frozenset({11})) == (("Xorg", 200 * MiB),)
