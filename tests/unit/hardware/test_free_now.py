"""The free memory a launch reads right before it starts, on recorded NVML snapshots: the
GPUs the server runs on, the launching kvpilot's own server left out of the holders."""

from __future__ import annotations

from collections.abc import Callable

from kvpilot.core.hardware import target
from kvpilot.core.hardware.free_now import free_memory_reader, read_free_memory
from kvpilot.core.hardware.probe import memory_holders, probe
from kvpilot.core.hardware.recorded_nvml import RecordedNvml


def test_the_reading_is_the_gpus_free_memory_and_its_holders(
    fake: Callable[[str], RecordedNvml],
) -> None:
    gpu = probe(fake("rtx4090-desktop")).gpus[0]
    reading = read_free_memory((0,), nvml_module=fake("rtx4090-desktop"))
    assert reading is not None
    free, holders = reading
    assert free == gpu.memory_free_bytes
    assert holders == memory_holders(gpu)
    assert len(holders) >= 2  # the desktop's programs, largest first
    assert [b for _, b in holders] == sorted((b for _, b in holders), reverse=True)


def test_its_own_server_is_left_out(fake: Callable[[str], RecordedNvml]) -> None:
    gpu = probe(fake("rtx4090-desktop")).gpus[0]
    biggest = max((p for p in gpu.processes if p.used_bytes), key=lambda p: p.used_bytes or 0)
    reading = read_free_memory((0,), nvml_module=fake("rtx4090-desktop"),
                               exclude_pids=frozenset({biggest.pid}))
    assert reading is not None
    assert len(reading[1]) == len(memory_holders(gpu)) - 1
    assert (biggest.name or f"pid {biggest.pid}", biggest.used_bytes) not in reading[1]


def test_several_gpus_read_as_the_plan_reads_them(fake: Callable[[str], RecordedNvml]) -> None:
    result = probe(fake("two-gpus"))
    both = target.from_probe(result, (0, 1))
    reading = read_free_memory((0, 1), nvml_module=fake("two-gpus"))
    assert reading is not None and reading[0] == both.free_bytes


def test_nothing_read_is_no_reading(fake: Callable[[str], RecordedNvml]) -> None:
    assert read_free_memory((0,), nvml_module=fake("no-devices")) is None
    assert read_free_memory((7,), nvml_module=fake("rtx4090-desktop")) is None  # gone
    assert free_memory_reader(target.cpu_target()) is None
    named = target.from_spec("NVIDIA GeForce RTX 4090")  # planned, not read here
    assert free_memory_reader(named) is None


def test_the_reader_reads_again_each_call(fake: Callable[[str], RecordedNvml]) -> None:
    device = target.from_probe(probe(fake("rtx4090-desktop")))
    own: list[frozenset[int]] = []

    def own_pids() -> frozenset[int]:
        own.append(frozenset())
        return frozenset()

    read = free_memory_reader(device, nvml_module=fake("rtx4090-desktop"), own_pids=own_pids)
    assert read is not None
    assert read() == read() == (device.free_bytes, device.memory_holders)
    assert len(own) == 2
