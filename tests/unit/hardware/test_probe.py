"""probe() against recorded snapshots: every field, WSL2, errors, lost GPUs, vanished processes."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from fakes import pynvml_stub

from kvpilot.core.hardware.probe import (
    ProbeResult,
    cuda_version_text,
    pci_device_id_text,
    probe,
    psutil_process_reader,
)
from kvpilot.core.hardware.problems import ProblemKind
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.system import SystemSnapshot

MiB = 1024**2
Fake = Callable[[str], RecordedNvml]


def test_rtx4090_desktop_every_field(fake: Fake, system: SystemSnapshot) -> None:
    replay = fake("rtx4090-desktop")
    result = probe(replay, system=system)
    assert result.ok and result.error is None
    assert result.driver_version == "550.54.14"
    assert result.cuda_driver_version == "12.4"
    assert result.nvml_version == "12.550.54.14"
    assert result.source == "replay of rtx4090-desktop"
    assert result.system is system
    (gpu,) = result.gpus
    assert gpu.index == 0
    assert gpu.name == "NVIDIA GeForce RTX 4090"
    assert gpu.uuid == "GPU-6f3a2c1e-8b4d-4e2a-9c71-0d5e3b7a9f12"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.pci_device_id == "0x2684"
    assert gpu.memory_total_bytes == 24564 * MiB
    assert gpu.memory_reserved_bytes == 346 * MiB
    assert gpu.memory_used_bytes == 1536 * MiB
    assert gpu.memory_free_bytes == (24564 - 346 - 1536) * MiB
    assert gpu.cuda_total_bytes == (24564 - 346) * MiB
    assert gpu.compute_capability == (8, 9)
    assert gpu.bar1_total_bytes == 256 * MiB and gpu.bar1_used_bytes == 14 * MiB
    assert (gpu.gpu_util_percent, gpu.mem_util_percent) == (3, 8)
    assert gpu.temperature_c == 41
    assert gpu.power_w == pytest.approx(31.2)
    assert gpu.power_limit_w == pytest.approx(450.0)
    assert (gpu.sm_clock_mhz, gpu.mem_clock_mhz) == (210, 405)
    assert gpu.throttle_reasons_mask == 1  # idle
    assert gpu.energy_mj == 10_368_000_000
    assert (gpu.pcie_gen, gpu.pcie_width) == (4, 16)
    assert gpu.display_attached is True and gpu.display_active is True
    assert gpu.ecc_enabled is None and gpu.mig_enabled is None  # GeForce: not supported
    assert gpu.persistence_enabled is False
    assert set(gpu.unavailable_fields) == {"ecc", "mig"}
    assert not gpu.lost
    names = {p.name: p for p in gpu.processes}
    assert set(names) == {"Xorg", "gnome-shell", "firefox"}
    assert names["firefox"].used_bytes == 802 * MiB
    assert names["firefox"].kind == "graphics"
    assert names["Xorg"].cmdline[0] == "/usr/lib/xorg/Xorg"
    assert gpu.processes_used_bytes == 1500 * MiB
    assert gpu.process_memory_reported is True
    assert replay.init_count == 0  # the session was closed


def test_wsl2_process_memory_is_not_reported_never_zero(fake: Fake, system: SystemSnapshot) -> None:
    (gpu,) = probe(fake("rtx4090-wsl2"), system=system).gpus
    assert gpu.processes
    assert all(p.used_bytes is None for p in gpu.processes)
    assert gpu.process_memory_reported is False
    assert gpu.processes_used_bytes is None
    assert gpu.memory_used_bytes == 1946 * MiB  # the device total is still known
    windows_side = next(p for p in gpu.processes if p.pid == 37)
    assert windows_side.host_visible is False and windows_side.name is None
    visible = next(p for p in gpu.processes if p.pid == 812)
    assert visible.name == "python3" and visible.cmdline == ("python3", "train.py")


def test_idle_3090_and_5090(fake: Fake, system: SystemSnapshot) -> None:
    (idle,) = probe(fake("rtx3090-idle"), system=system).gpus
    assert idle.processes == ()
    assert idle.process_memory_reported is None
    assert idle.processes_used_bytes == 0
    assert idle.compute_capability == (8, 6)
    assert idle.persistence_enabled is True and idle.display_attached is False
    (big,) = probe(fake("rtx5090"), system=system).gpus
    assert big.compute_capability == (12, 0)
    assert big.pcie_gen == 5
    (proc,) = big.processes
    assert proc.kind == "compute" and proc.used_bytes == 2048 * MiB


def test_throttling_card_reports_power_cap(fake: Fake, system: SystemSnapshot) -> None:
    (gpu,) = probe(fake("throttling"), system=system).gpus
    assert gpu.throttle_reasons_mask == 0x4
    assert gpu.power_w == pytest.approx(448.3) and gpu.power_limit_w == pytest.approx(450.0)
    assert "throttle_reasons" not in gpu.unavailable_fields


def test_unrecorded_throttle_and_energy_are_none_and_listed(
    fake: Fake, system: SystemSnapshot
) -> None:
    (gpu,) = probe(fake("rtx3090-idle"), system=system).gpus
    assert gpu.throttle_reasons_mask is None and gpu.energy_mj is None
    assert {"throttle_reasons", "energy"} <= set(gpu.unavailable_fields)
    assert gpu.power_limit_w == pytest.approx(350.0)


def test_4080_16gb(fake: Fake, system: SystemSnapshot) -> None:
    (gpu,) = probe(fake("rtx4080"), system=system).gpus
    assert gpu.memory_total_bytes == 16376 * MiB
    assert gpu.pci_device_id == "0x2704"


def test_two_gpus_are_read_in_index_order(fake: Fake, system: SystemSnapshot) -> None:
    result = probe(fake("two-gpus"), system=system)
    assert [g.name for g in result.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert [g.index for g in result.gpus] == [0, 1]


def test_not_supported_fields_are_none_and_listed(fake: Fake, system: SystemSnapshot) -> None:
    (gpu,) = probe(fake("notsupported"), system=system).gpus
    assert gpu.power_w is None and gpu.temperature_c is None
    assert gpu.gpu_util_percent is None and gpu.bar1_total_bytes is None
    assert gpu.pcie_gen is None and gpu.pcie_width == 16
    assert gpu.ecc_enabled is True
    # v1 memory query only: reserved unknown, used includes it
    assert gpu.memory_reserved_bytes is None
    assert gpu.cuda_total_bytes == gpu.memory_total_bytes
    # graphics list forbidden, compute list still read
    assert [p.pid for p in gpu.processes] == [7001]
    for name in (
        "power",
        "temperature",
        "utilization",
        "bar1",
        "pcie_gen",
        "memory_reserved",
        "graphics_processes",
    ):
        assert name in gpu.unavailable_fields


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("no-driver", ProblemKind.LIBRARY_NOT_FOUND),
        ("no-devices", ProblemKind.NO_DEVICES),
        ("version-mismatch", ProblemKind.VERSION_MISMATCH),
    ],
)
def test_unusable_nvml_is_a_typed_result(
    fake: Fake, system: SystemSnapshot, name: str, kind: ProblemKind
) -> None:
    result = probe(fake(name), system=system)
    assert isinstance(result, ProbeResult)
    assert not result.ok and result.gpus == ()
    assert result.error is not None and result.error.kind is kind
    assert result.error.action
    assert result.system is system  # the host is still described


def test_gpu_lost_during_probe_marks_it_lost(
    snapshot: Callable[[str], dict[str, Any]], system: SystemSnapshot
) -> None:
    data = snapshot("two-gpus")
    data["devices"][0]["lost_after_calls"] = 5
    result = probe(pynvml_stub.make(data), system=system)
    first, second = result.gpus
    assert first.lost and first.name == "NVIDIA GeForce RTX 4090" and first.processes == ()
    assert not second.lost and second.memory_total_bytes is not None
    assert result.error is None and result.ok
    assert any("GPU 0" in w for w in result.warnings)


def test_all_gpus_lost_is_an_error(
    snapshot: Callable[[str], dict[str, Any]], system: SystemSnapshot
) -> None:
    data = snapshot("rtx4090-desktop")
    data["devices"][0]["lost_after_calls"] = 0
    result = probe(pynvml_stub.make(data), system=system)
    assert result.gpus[0].lost
    assert result.error is not None and result.error.kind is ProblemKind.GPU_LOST


def test_same_pid_in_both_lists_is_merged(system: SystemSnapshot) -> None:
    replay = pynvml_stub.make(
        {
            "devices": [
                {
                    "name": "G",
                    "memory": {"total": 100, "reserved": 0, "used": 50, "free": 50},
                    "compute_processes": [{"pid": 10, "used_bytes": 40}],
                    "graphics_processes": [
                        {"pid": 10, "used_bytes": 40},
                        {"pid": 11, "used_bytes": 5},
                    ],
                }
            ],
            "host_processes": {
                "10": {"name": "blender", "cmdline": ["blender"]},
                "11": {"name": "Xorg", "cmdline": ["Xorg"]},
            },
        }
    )
    (gpu,) = probe(replay, system=system).gpus
    assert [(p.pid, p.kind, p.used_bytes) for p in gpu.processes] == [
        (10, "compute+graphics", 40),
        (11, "graphics", 5),
    ]


def test_custom_process_reader_and_vanished_process(fake: Fake, system: SystemSnapshot) -> None:
    seen: list[int] = []

    def reader(pid: int) -> tuple[str | None, tuple[str, ...]] | None:
        seen.append(pid)
        return None if pid == 3120 else (f"proc{pid}", ("x",))

    (gpu,) = probe(fake("rtx4090-desktop"), system=system, process_reader=reader).gpus
    assert sorted(seen) == [2211, 2468, 3120]
    gone = next(p for p in gpu.processes if p.pid == 3120)
    # NVML still knows its name (nvmlSystemGetProcessName); memory is kept
    assert gone.host_visible is False and gone.name == "firefox" and gone.used_bytes == 802 * MiB


def test_psutil_reader_reads_this_process() -> None:
    info = psutil_process_reader(os.getpid())
    assert info is not None
    name, cmdline = info
    assert name and cmdline


def test_psutil_reader_handles_a_process_that_vanishes_mid_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Vanishing:
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def oneshot(self) -> Any:
            import contextlib

            return contextlib.nullcontext()

        def name(self) -> str:
            raise psutil.NoSuchProcess(self.pid)

    monkeypatch.setattr(psutil, "Process", Vanishing)
    assert psutil_process_reader(4242) is None


def test_psutil_reader_access_denied_keeps_the_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(pid: int) -> Any:
        raise psutil.AccessDenied(pid)

    monkeypatch.setattr(psutil, "Process", denied)
    assert psutil_process_reader(1) == (None, ())


def test_psutil_reader_pid_that_does_not_exist() -> None:
    assert psutil_process_reader(2**22 + 12345) is None


def test_helpers() -> None:
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(12080) == "12.8"
    assert cuda_version_text(None) is None
    assert pci_device_id_text(0x268410DE) == "0x2684"
    assert pci_device_id_text(None) is None


def test_old_driver_process_list_falls_back_to_v2(fake: Fake, system: SystemSnapshot) -> None:
    replay = fake("rtx4090-desktop")
    listed = replay.nvmlDeviceGetGraphicsRunningProcesses

    def unversioned_missing(handle: Any) -> Any:
        raise replay.NVMLLibraryMismatchError("use nvmlDeviceGetGraphicsRunningProcesses_v2")

    replay.nvmlDeviceGetGraphicsRunningProcesses = unversioned_missing  # type: ignore[method-assign]
    replay.nvmlDeviceGetGraphicsRunningProcesses_v2 = listed  # type: ignore[attr-defined]
    (gpu,) = probe(replay, system=system).gpus
    assert {p.name for p in gpu.processes} == {"Xorg", "gnome-shell", "firefox"}
    assert "graphics_processes" not in gpu.unavailable_fields


def test_a_wsl2_snapshot_is_planned_as_wsl2_and_a_linux_one_is_not(
    fake: Fake, system: SystemSnapshot
) -> None:
    from kvpilot.core.hardware import target

    (wsl,) = probe(fake("rtx4090-wsl2"), system=system).gpus
    (desk,) = probe(fake("rtx4090-desktop"), system=system).gpus
    # Windows' WDDM driver reports no per-process memory: the replay is WSL2 on any host
    assert target.from_snapshot(wsl).under_wsl2
    assert target.from_snapshot(wsl).card().under_wsl2
    assert not target.from_snapshot(desk).under_wsl2
    # a Linux replay read on a WSL2 host: the probe's reading of the host decides
    assert target.from_snapshot(desk, host_is_wsl2=True).under_wsl2
