"""The VRAM split for the memory bar: other processes, driver, vLLM's parts, free (bytes)."""

from __future__ import annotations

from fitkit import fixture_spec, rtx4090

from kvpilot.core.app.vram import (
    UNATTRIBUTED,
    VramSplit,
    plan_bytes,
    process_bytes,
    short_process_name,
    split_vram,
)
from kvpilot.core.fit.budget import compute_capacity, overhead_bytes
from kvpilot.core.fit.measurements import ReportedCapacity
from kvpilot.core.hardware.probe import GpuProcess, GpuSnapshot
from kvpilot.core.hardware.sampler import GpuSample

GiB = 1 << 30


def _proc(pid: int, name: str, used: int | None) -> GpuProcess:
    return GpuProcess(pid=pid, name=name, cmdline=(name,), used_bytes=used, kind="compute")


def _gpu(*procs: GpuProcess, used: int = 20 * GiB, reserved: int = 0) -> GpuSnapshot:
    total = 24 * GiB
    return GpuSnapshot(
        index=0,
        memory_total_bytes=total,
        memory_used_bytes=used,
        memory_free_bytes=total - used - reserved,
        memory_reserved_bytes=reserved,
        processes=procs,
    )


def _sum(split: VramSplit) -> int:
    return (
        split.reserved_bytes + sum(n for _, n in split.other_bytes) + split.vllm_bytes
        + split.free_bytes
    )


REPORTED = ReportedCapacity(weights_bytes=9 * GiB, available_kv_bytes=8 * GiB, sources=("log",))


def test_running_server_splits_its_processes_memory_as_reported() -> None:
    gpu = _gpu(_proc(1, "/usr/lib/xorg/Xorg", GiB), _proc(2, "python3", 18 * GiB))
    split = split_vram(gpu, {2}, REPORTED)
    assert split is not None
    assert split.other_bytes == (("Xorg", GiB), (UNATTRIBUTED, GiB))
    assert (split.weights_bytes, split.kv_bytes, split.activation_bytes) == (
        9 * GiB, 8 * GiB, GiB,
    )
    assert split.free_bytes == 4 * GiB and not split.planned
    assert _sum(split) == 24 * GiB


def test_driver_reserved_memory_is_its_own_segment() -> None:
    gpu = _gpu(_proc(2, "python3", 18 * GiB), used=18 * GiB, reserved=GiB // 2)
    split = split_vram(gpu, {2}, REPORTED)
    assert split is not None
    assert split.reserved_bytes == GiB // 2
    assert split.free_bytes == 24 * GiB - 18 * GiB - GiB // 2
    assert _sum(split) == 24 * GiB


def test_wsl2_without_per_process_memory_uses_the_plans_request() -> None:
    """The driver reports no per-process memory: vLLM's share is what the plan requests."""
    plan = compute_capacity(rtx4090(fixture_spec("qwen2.5-7b-instruct", 15_231_233_024),
                                    gpu_memory_utilization=0.8))
    gpu = _gpu(_proc(1, "Xorg", None), _proc(2, "python3", None))
    split = split_vram(gpu, {2}, plan)
    assert split is not None
    assert split.vllm_bytes == plan.requested_bytes
    assert split.other_bytes == ((UNATTRIBUTED, 20 * GiB - plan.requested_bytes),)
    assert split.weights_bytes == plan.weights_bytes
    assert split.kv_bytes == plan.available_kv_bytes


def test_a_server_that_reported_nothing_yet_is_all_overhead() -> None:
    gpu = _gpu(_proc(2, "python3", 3 * GiB), used=3 * GiB)
    split = split_vram(gpu, {2}, None)
    assert split is not None
    assert (split.weights_bytes, split.kv_bytes, split.activation_bytes) == (0, 0, 3 * GiB)


def test_negative_reported_kv_draws_no_kv() -> None:
    over = ReportedCapacity(weights_bytes=17 * GiB, available_kv_bytes=-GiB, sources=("log",))
    split = split_vram(_gpu(_proc(2, "python3", 18 * GiB), used=18 * GiB), {2}, over)
    assert split is not None
    assert (split.weights_bytes, split.kv_bytes, split.activation_bytes) == (17 * GiB, 0, GiB)


def test_without_a_server_a_plan_is_drawn_in_the_free_memory() -> None:
    plan = compute_capacity(rtx4090(fixture_spec("qwen2.5-7b-instruct", 15_231_233_024),
                                    gpu_memory_utilization=0.8))
    gpu = _gpu(_proc(1, "Xorg", GiB), used=GiB)
    split = split_vram(gpu, (), plan)
    assert split is not None and split.planned
    assert split.weights_bytes == plan.weights_bytes
    assert split.activation_bytes == overhead_bytes(plan)
    assert split.kv_bytes == plan.available_kv_bytes
    assert split.free_bytes == 23 * GiB - plan.weights_bytes - overhead_bytes(plan) - (
        plan.available_kv_bytes
    )
    assert _sum(split) == 24 * GiB


def test_a_plan_larger_than_the_free_memory_is_clipped_to_it() -> None:
    plan = compute_capacity(rtx4090(fixture_spec("qwen2.5-7b-instruct", 15_231_233_024),
                                    gpu_memory_utilization=0.8))
    split = split_vram(_gpu(_proc(1, "game", 20 * GiB)), (), plan)
    assert split is not None
    assert split.free_bytes == 0
    assert split.weights_bytes + split.activation_bytes + split.kv_bytes == 4 * GiB


def test_a_reported_capacity_without_a_server_is_not_drawn() -> None:
    split = split_vram(_gpu(_proc(1, "Xorg", GiB), used=GiB), (), REPORTED)
    assert split is not None
    assert not split.planned and split.vllm_bytes == 0 and split.free_bytes == 23 * GiB


def test_samples_carry_pids_only_and_names_come_from_the_caller() -> None:
    sample = GpuSample(
        t_monotonic_s=1.0, gpu_index=0, memory_used_bytes=6 * GiB,
        memory_total_bytes=24 * GiB, memory_free_bytes=18 * GiB,
        process_used_bytes={7: 2 * GiB, 8: 4 * GiB},
    )
    assert process_bytes(sample) == {7: 2 * GiB, 8: 4 * GiB}
    split = split_vram(sample, (), None, names={8: "/opt/steam/game"})
    assert split is not None
    assert split.other_bytes == (("game", 4 * GiB), ("pid 7", 2 * GiB))


def test_no_total_memory_no_split() -> None:
    assert split_vram(GpuSnapshot(index=0), (), None) is None


def test_short_names() -> None:
    assert short_process_name("/usr/bin/python3", 4) == "python3"
    assert short_process_name(None, 4) == "pid 4"
    assert short_process_name("", 9) == "pid 9"


def test_a_plan_places_its_weights_overhead_and_kv() -> None:
    plan = compute_capacity(rtx4090(fixture_spec("qwen2.5-7b-instruct", 15_231_233_024),
                                    max_model_len=8192))
    weights, activation, kv = plan_bytes(plan)
    assert weights == plan.weights_bytes > 0
    assert activation == overhead_bytes(plan) > 0
    assert kv == plan.available_kv_bytes > 0
