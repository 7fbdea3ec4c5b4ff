"""The replay must answer like NVIDIA's pynvml: same names, codes, error classes and shapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes import pynvml_stub
from testpaths import REPO

from kvpilot.core.base.errors import HardwareError
from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.recorded_nvml import RecordedNvml, load_recorded, snapshot_names

HARDWARE_DIR = REPO / "core" / "hardware"


def _functions_called_by_production() -> set[str]:
    names: set[str] = set()
    for path in HARDWARE_DIR.glob("*.py"):
        if path.name == "recorded_nvml.py":
            continue
        names.update(re.findall(r'"(nvml(?:Init|Shutdown|System|Device)\w*)"', path.read_text()))
        names.update(re.findall(r"module\.(nvml[A-Z]\w+)", path.read_text()))
    return names


def test_every_function_production_calls_exists_in_pynvml_and_in_the_fake() -> None:
    real = nvml_mod.import_pynvml()
    fake = pynvml_stub.load("rtx4090-desktop")
    called = _functions_called_by_production()
    assert {"nvmlInit", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetComputeRunningProcesses"} <= called
    for name in called:
        assert callable(getattr(real, name, None)), f"pynvml has no {name}"
        assert callable(getattr(fake, name, None)), f"the fake has no {name}"


def test_error_codes_and_class_names_match_pynvml() -> None:
    real = nvml_mod.import_pynvml()
    fake = pynvml_stub.load("rtx4090-desktop")
    real_codes = {n: getattr(real, n) for n in dir(real) if n.startswith("NVML_ERROR_")}
    for name, code in real_codes.items():
        if hasattr(fake, name):
            assert getattr(fake, name) == code, name
    for name in (
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_ERROR_NO_PERMISSION",
        "NVML_ERROR_LIBRARY_NOT_FOUND",
        "NVML_ERROR_DRIVER_NOT_LOADED",
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
    ):
        assert getattr(fake, name) == getattr(real, name)
        cls_name = "NVMLError_" + "".join(
            w.capitalize() for w in name[len("NVML_ERROR_") :].split("_")
        )
        assert hasattr(real, cls_name) and hasattr(fake, cls_name), cls_name
    for const in ("nvmlMemory_v2", "NVML_TEMPERATURE_GPU", "NVML_CLOCK_SM", "NVML_CLOCK_MEM"):
        assert getattr(fake, const) == getattr(real, const)


def test_nvmlerror_construction_maps_code_to_subclass_like_pynvml() -> None:
    fake = pynvml_stub.load("rtx4090-desktop")
    err = fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(err, fake.NVMLError_NotSupported)
    assert isinstance(err, fake.NVMLError)
    assert err.value == 3
    assert fake.NVMLError_GpuIsLost().value == 15


def test_memory_v2_struct_has_pynvml_field_names() -> None:
    real = nvml_mod.import_pynvml()
    v2_fields = {name for name, _ in real.c_nvmlMemory_v2_t._fields_}
    v1_fields = {name for name, _ in real.c_nvmlMemory_t._fields_}
    fake = pynvml_stub.load("rtx4090-desktop")
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v2 = fake.nvmlDeviceGetMemoryInfo(handle, version=fake.nvmlMemory_v2)
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    assert v2_fields <= set(vars(v2))
    assert v1_fields <= set(vars(v1))
    assert v2.total == v2.reserved + v2.used + v2.free
    assert v1.used == v2.used + v2.reserved  # v1 "used" includes the reserved part
    assert v1.free == v2.free


def test_process_entries_have_pynvml_attributes_and_none_for_not_available() -> None:
    real = nvml_mod.import_pynvml()
    fields = {name for name, _ in real.c_nvmlProcessInfo_t._fields_}
    fake = pynvml_stub.load("rtx4090-wsl2")
    fake.nvmlInit()
    procs = fake.nvmlDeviceGetComputeRunningProcesses(fake.nvmlDeviceGetHandleByIndex(0))
    assert procs and all(fields <= set(vars(p)) for p in procs)
    assert all(p.usedGpuMemory is None for p in procs)


def test_calls_before_init_raise_uninitialized() -> None:
    fake = pynvml_stub.load("rtx4090-desktop")
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_init_error_from_snapshot() -> None:
    fake = pynvml_stub.load("no-driver")
    with pytest.raises(fake.NVMLError_LibraryNotFound):
        fake.nvmlInit()


def test_lost_after_calls_turns_every_later_call_into_gpu_is_lost() -> None:
    fake = pynvml_stub.make(
        {"devices": [{"name": "X", "temperature_c": 50, "lost_after_calls": 2}]}
    )
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetTemperature(h, 0) == 50
    assert fake.nvmlDeviceGetName(h) == "X"
    for _ in range(3):
        with pytest.raises(fake.NVMLError_GpuIsLost):
            fake.nvmlDeviceGetName(h)


def test_dynamic_lists_cycle_but_structured_lists_do_not() -> None:
    fake = pynvml_stub.load("rtx4090-desktop")
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    temps = [fake.nvmlDeviceGetTemperature(h, 0) for _ in range(6)]
    assert temps == [41, 41, 42, 42, 41, 41]
    assert fake.nvmlDeviceGetCudaComputeCapability(h) == (8, 9)
    assert fake.nvmlDeviceGetCudaComputeCapability(h) == (8, 9)


def test_pci_info_returns_bytes_bus_id_and_full_device_id_like_pynvml() -> None:
    fake = pynvml_stub.load("rtx4090-desktop")
    fake.nvmlInit()
    pci = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert pci.busId == b"00000000:01:00.0"
    assert pci.pciDeviceId == 0x268410DE


def test_shipped_snapshots_cover_the_issue_cases() -> None:
    names = set(snapshot_names())
    assert {
        "rtx4090-desktop",
        "rtx3090-idle",
        "rtx4080",
        "rtx5090",
        "rtx4090-wsl2",
        "no-driver",
    } <= names


@pytest.mark.parametrize("name", snapshot_names())
def test_every_shipped_snapshot_is_consistent(name: str) -> None:
    fake = load_recorded(name)
    for dev in fake.snapshot.get("devices", []):
        mem = dev["memory"]
        assert mem["total"] == mem["reserved"] + mem["used"] + mem["free"], name
        listed = sum(
            p["used_bytes"] or 0
            for k in ("compute_processes", "graphics_processes")
            for p in dev[k]
        )
        assert listed <= mem["used"], name


def test_load_fake_rejects_unknown_names_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(HardwareError, match=r"unknown GPU snapshot 'nope'.*rtx4090-desktop"):
        load_recorded("nope")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(HardwareError, match="not valid JSON"):
        load_recorded(bad)
    with pytest.raises(HardwareError, match="cannot read"):
        load_recorded(tmp_path / "missing.json")


def test_throttle_reasons_cycle_and_both_function_names_answer() -> None:
    fake = pynvml_stub.load("throttling")
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    masks = [fake.nvmlDeviceGetCurrentClocksEventReasons(h) for _ in range(7)]
    assert masks == [4, 4, 4, 32, 32, 36, 4]  # power cap, then thermal, then both
    assert fake.nvmlDeviceGetCurrentClocksThrottleReasons(h) == 4
    desktop = pynvml_stub.load("rtx4090-desktop")
    desktop.nvmlInit()
    dh = desktop.nvmlDeviceGetHandleByIndex(0)
    assert desktop.nvmlDeviceGetCurrentClocksEventReasons(dh) == 1  # idle


def test_energy_counter_grows_by_the_reported_power_times_elapsed_time() -> None:
    now = [100.0]
    base = load_recorded(pynvml_stub.DATA_DIR / "throttling.json")
    fake = RecordedNvml(base.snapshot, source="<test>", clock=lambda: now[0])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    start = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    assert start == 10_368_000_000
    now[0] += 2.0  # no power read yet: the first recorded draw, 448.3 W
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) == start + 896_600
    assert fake.nvmlDeviceGetPowerUsage(h) == 448_300
    assert fake.nvmlDeviceGetPowerUsage(h) == 450_100
    now[0] += 0.5  # the draw last reported counts: 450.1 W x 0.5 s
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) == start + 896_600 + 225_050


def test_unrecorded_throttle_and_energy_are_not_supported() -> None:
    fake = pynvml_stub.load("rtx3090-idle")
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    for read in (
        fake.nvmlDeviceGetCurrentClocksEventReasons,
        fake.nvmlDeviceGetCurrentClocksThrottleReasons,
        fake.nvmlDeviceGetTotalEnergyConsumption,
    ):
        with pytest.raises(fake.NVMLError_NotSupported):
            read(h)
