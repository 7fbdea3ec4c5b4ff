"""Planner mode: a recorded GPU snapshot, answering NVML's calls like NVIDIA's ``pynvml`` module.

This is the app's only use of a stand-in for the driver: load a recorded snapshot
(``resources/nvml_<name>.json`` or a file) and answer the functions, constants and
``NVMLError`` classes of ``pynvml`` (nvidia-ml-py) that kvpilot uses, with the same names, error
codes and return shapes. ``kvpilot gpu --fake-nvml NAME``, the GUI's ``--fake-gpu NAME`` and
``KVPILOT_FAKE_NVML`` plan for a machine one does not have, and documentation screenshots are
reproducible. The production NVML code (:mod:`kvpilot.core.hardware.nvml`) reads it exactly as it
reads the real library. Injected faults (a GPU lost after N calls) are not recordings: the test
double in ``tests/fakes/pynvml_stub.py`` adds them.

Snapshot format (all sizes in bytes, powers in milliwatts as NVML reports them)::

    {
      "description": "...", "provenance": "...",
      "init_error": null | "LIBRARY_NOT_FOUND" | "DRIVER_NOT_LOADED" | ...   (NVML_ERROR_* suffix)
      "driver_version": "550.54.14", "cuda_driver_version": 12040, "nvml_version": "12.550.54.14",
      "devices": [{
        "name", "uuid", "pci_bus_id", "pci_device_id": "0x268410DE",
        "memory": {"total", "reserved", "used", "free"}, "memory_v2": true,
        "bar1": {"total", "used", "free"}, "compute_capability": [8, 9],
        "utilization": {"gpu": 3, "memory": 10}, "temperature_c": 41,
        "power_mw": 31000, "power_limit_mw": 450000, "clocks_mhz": {"sm": 210, "mem": 405},
        "throttle_reasons": 1 | [4, 4, 32], "energy_mj": 81234567,
        "pcie": {"gen": 4, "width": 16}, "display_mode": 1, "display_active": 1,
        "ecc_mode": [0, 0], "mig_mode": [0, 0], "persistence_mode": 0,
        "compute_processes": [{"pid": 1, "used_bytes": 123 | null}], "graphics_processes": [...],
        "errors": {"nvmlDeviceGetPowerUsage": "NOT_SUPPORTED"}
      }],
      "host_processes": {"2211": {"name": "Xorg", "cmdline": ["/usr/lib/xorg/Xorg", "vt2"]}},
      "links": [{"devices": [0, 1], "topology": 30,
                 "p2p": {"read": 2, "write": 2, "nvlink": 2}}]
    }

``links`` (optional) answers ``nvmlDeviceGetTopologyCommonAncestor`` (an ``NVML_TOPOLOGY_*``
level) and ``nvmlDeviceGetP2PStatus`` (``NVML_P2P_STATUS_*`` per capability) for a pair.

A dynamic scalar (utilization, temperature, power, clocks, ``throttle_reasons``) may be a list:
successive reads cycle through it. ``throttle_reasons`` is NVML's clock-event reason mask as an
integer (``nvml.h`` bits: 1 idle, 4 power cap, 32 thermal...); both the current
``nvmlDeviceGetCurrentClocksEventReasons`` and the older ``...ClocksThrottleReasons`` answer it.
``energy_mj`` is the energy counter's value (millijoules since the driver loaded) at the first
``nvmlDeviceGetTotalEnergyConsumption``; later reads add the power draw last reported (the
first ``power_mw`` before any read) times the monotonic time elapsed, as a real counter grows.
Either key missing (or null) answers ``NVML_ERROR_NOT_SUPPORTED``, as older GPUs do.

A pid missing from ``host_processes`` behaves like a process that exited (or lives outside this
PID namespace) before it could be read.
"""

from __future__ import annotations

import json
import string
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# NVML return codes, identical to nvml.h / pynvml
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

# topology and peer-to-peer (nvml.h)
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_P2P_CAPS_INDEX_READ = 0
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlMemory_v2 = 0x02000028

_CODES: dict[str, int] = {
    name[len("NVML_ERROR_") :]: value
    for name, value in dict(globals()).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


class NVMLError(Exception):
    """Same contract as ``pynvml.NVMLError``: ``.value`` is the NVML return code, and
    ``NVMLError(code)`` builds the matching ``NVMLError_<Name>`` subclass."""

    _class_for_code: dict[int, type[NVMLError]] = {}  # noqa: RUF012 - filled once below
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._class_for_code.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        for name, code in _CODES.items():
            if code == self.value:
                return name.replace("_", " ").capitalize()
        return f"NVML Error with code {self.value}"


class NVMLLibraryMismatchError(Exception):
    """Raised by ``pynvml`` when an unversioned function is missing from an older driver."""


def _class_name(suffix: str) -> str:
    return "NVMLError_" + string.capwords(suffix, "_").replace("_", "")


def _make_error_classes() -> dict[str, type[NVMLError]]:
    made: dict[str, type[NVMLError]] = {}
    for suffix, code in _CODES.items():

        def new(cls: type[NVMLError], *_args: Any, _code: int = code) -> NVMLError:
            obj = Exception.__new__(cls)
            obj.value = _code
            return obj

        cls = type(_class_name(suffix), (NVMLError,), {"__new__": new, "__module__": __name__})
        NVMLError._class_for_code[code] = cls
        made[cls.__name__] = cls
    return made


ERROR_CLASSES: dict[str, type[NVMLError]] = _make_error_classes()
globals().update(ERROR_CLASSES)

#: snapshots shipped as package data: resources/nvml_<name>.json
SNAPSHOT_PREFIX = "nvml_"


@dataclass(frozen=True)
class RecordedHostProcess:
    """What the replay knows about a host process (stands in for psutil)."""

    pid: int
    name: str
    cmdline: tuple[str, ...]


class _Handle:
    """Opaque device handle, like ``pynvml.c_nvmlDevice_t``."""

    def __init__(self, index: int, data: Mapping[str, Any]) -> None:
        self.index = index
        self.data = data
        self.calls = 0
        self.reads: dict[str, int] = {}
        #: the power draw last answered (mW), and the energy counter's (t_monotonic_s, mJ)
        self.last_power_mw: float | None = None
        self.energy: tuple[float, float] | None = None

    def __repr__(self) -> str:
        return f"<recorded nvmlDevice {self.index}>"


class RecordedNvml:
    """An object with the ``pynvml`` module interface, answering from one snapshot.

    Thread-safe (one lock around every call), like the real library. ``init_count`` and
    ``call_count`` let tests and benchmarks see how NVML is used. ``clock`` (monotonic seconds)
    advances the energy counter; tests pass their own.
    """

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError

    def __init__(
        self,
        snapshot: Mapping[str, Any],
        *,
        source: str = "<dict>",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.snapshot = snapshot
        self.source = source
        self.clock = clock
        self.init_count = 0
        self.call_count = 0
        self._lock = threading.Lock()
        self._handles = [_Handle(i, d) for i, d in enumerate(snapshot.get("devices", []))]
        for name, value in globals().items():
            if name.startswith(("NVML_", "nvmlMemory_")) or name in ERROR_CLASSES:
                setattr(self, name, value)

    def __repr__(self) -> str:
        return f"<RecordedNvml replaying {self.source}>"

    # ---------------------------------------------------------------- plumbing
    def _raise(self, code_name: str) -> None:
        raise NVMLError(_CODES[code_name])

    def _check_init(self) -> None:
        if self.init_count <= 0:
            self._raise("UNINITIALIZED")

    def _device(self, handle: Any, function: str) -> _Handle:
        self.call_count += 1
        self._check_init()
        if not isinstance(handle, _Handle):
            self._raise("INVALID_ARGUMENT")
        handle.calls += 1
        error = handle.data.get("errors", {}).get(function)
        if error:
            self._raise(error)
        return handle

    @staticmethod
    def _cycle(handle: _Handle, key: str, value: Any) -> Any:
        if isinstance(value, list):
            n = handle.reads.get(key, 0)
            handle.reads[key] = n + 1
            return value[n % len(value)]
        return value

    def _field(self, handle: Any, function: str, *path: str, cycle: bool = False) -> Any:
        with self._lock:
            h = self._device(handle, function)
            value: Any = h.data
            for key in path:
                if not isinstance(value, Mapping) or value.get(key) is None:
                    self._raise("NOT_SUPPORTED")
                value = value[key]
            return self._cycle(h, function + "/".join(path), value) if cycle else value

    def _section(self, handle: _Handle, key: str) -> Mapping[str, Any]:
        """The recorded mapping ``key`` of a device (``memory``, ``utilization``), or the
        NOT_SUPPORTED error a driver gives when it cannot report that group of values."""
        value = handle.data.get(key)
        if not isinstance(value, Mapping):
            self._raise("NOT_SUPPORTED")
        assert isinstance(value, Mapping)
        return value

    # ---------------------------------------------------------------- system
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:  # noqa: ARG002 - pynvml's signature
        with self._lock:
            self.call_count += 1
            error = self.snapshot.get("init_error")
            if error:
                self._raise(error)
            self.init_count += 1

    def nvmlShutdown(self) -> None:
        with self._lock:
            self.call_count += 1
            self._check_init()
            self.init_count -= 1

    def _system(self, key: str) -> Any:
        with self._lock:
            self.call_count += 1
            self._check_init()
            value = self.snapshot.get(key)
            if value is None:
                self._raise("NOT_SUPPORTED")
            return value

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self._system("driver_version"))

    def nvmlSystemGetNVMLVersion(self) -> str:
        return str(self._system("nvml_version"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self._system("cuda_driver_version"))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.nvmlSystemGetCudaDriverVersion()

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        proc = self.read_process(pid)
        if proc is None:
            self._raise("NOT_FOUND")
        assert proc is not None
        return proc.name

    def nvmlDeviceGetCount(self) -> int:
        with self._lock:
            self.call_count += 1
            self._check_init()
            return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        with self._lock:
            self.call_count += 1
            self._check_init()
            if not 0 <= index < len(self._handles):
                self._raise("INVALID_ARGUMENT")
            return self._handles[index]

    # ---------------------------------------------------------------- identity
    def nvmlDeviceGetName(self, handle: Any) -> str:
        return str(self._field(handle, "nvmlDeviceGetName", "name"))

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return str(self._field(handle, "nvmlDeviceGetUUID", "uuid"))

    def nvmlDeviceGetPciInfo(self, handle: Any) -> SimpleNamespace:
        with self._lock:
            h = self._device(handle, "nvmlDeviceGetPciInfo")
            bus_id = str(h.data.get("pci_bus_id", "00000000:01:00.0"))
            device_id = int(str(h.data.get("pci_device_id", "0x0")), 16)
            return SimpleNamespace(
                busId=bus_id.encode(),  # c_char arrays come back as bytes in pynvml
                busIdLegacy=bus_id.encode(),
                domain=int(bus_id.split(":")[0], 16),
                bus=int(bus_id.split(":")[1], 16),
                device=int(bus_id.split(":")[2].split(".")[0], 16),
                pciDeviceId=device_id,
                pciSubSystemId=int(str(h.data.get("pci_subsystem_id", "0x0")), 16),
            )

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> SimpleNamespace:
        return self.nvmlDeviceGetPciInfo(handle)

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._field(
            handle, "nvmlDeviceGetCudaComputeCapability", "compute_capability"
        )
        return (int(major), int(minor))

    # ---------------------------------------------------------------- memory
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> SimpleNamespace:
        with self._lock:
            h = self._device(handle, "nvmlDeviceGetMemoryInfo")
            mem = self._section(h, "memory")
            if not version:
                # v1: "used" includes the memory the driver reserves
                return SimpleNamespace(
                    total=int(mem["total"]),
                    free=int(mem["free"]),
                    used=int(mem["used"]) + int(mem.get("reserved") or 0),
                )
            if not h.data.get("memory_v2", True):
                self._raise("FUNCTION_NOT_FOUND")
            if version != nvmlMemory_v2:
                self._raise("ARGUMENT_VERSION_MISMATCH")
            return SimpleNamespace(
                version=version,
                total=int(mem["total"]),
                reserved=int(mem.get("reserved") or 0),
                free=int(mem["free"]),
                used=int(mem["used"]),
            )

    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Any) -> SimpleNamespace:
        bar1 = self._field(handle, "nvmlDeviceGetBAR1MemoryInfo", "bar1")
        return SimpleNamespace(
            bar1Total=int(bar1["total"]), bar1Used=int(bar1["used"]), bar1Free=int(bar1["free"])
        )

    # ---------------------------------------------------------------- dynamic values
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> SimpleNamespace:
        with self._lock:
            h = self._device(handle, "nvmlDeviceGetUtilizationRates")
            util = self._section(h, "utilization")
            return SimpleNamespace(
                gpu=int(self._cycle(h, "util.gpu", util["gpu"])),
                memory=int(self._cycle(h, "util.memory", util["memory"])),
            )

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        if sensor != NVML_TEMPERATURE_GPU:
            with self._lock:
                self._raise("INVALID_ARGUMENT")
        return int(self._field(handle, "nvmlDeviceGetTemperature", "temperature_c", cycle=True))

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        value = int(self._field(handle, "nvmlDeviceGetPowerUsage", "power_mw", cycle=True))
        handle.last_power_mw = value
        return value

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        with self._lock:
            h = self._device(handle, "nvmlDeviceGetTotalEnergyConsumption")
            start = h.data.get("energy_mj")
            if start is None:
                self._raise("NOT_SUPPORTED")
            assert start is not None
            now = self.clock()
            if h.energy is None:
                h.energy = (now, float(start))
            else:
                recorded = h.data.get("power_mw")
                if isinstance(recorded, list):
                    recorded = recorded[0] if recorded else None
                power_mw = h.last_power_mw if h.last_power_mw is not None else recorded
                then, energy = h.energy
                h.energy = (now, energy + float(power_mw or 0) * max(0.0, now - then))
            return int(h.energy[1])

    def _throttle(self, handle: Any, function: str) -> int:
        return int(self._field(handle, function, "throttle_reasons", cycle=True))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._throttle(handle, "nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._throttle(handle, "nvmlDeviceGetCurrentClocksThrottleReasons")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mw"))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        key = {NVML_CLOCK_SM: "sm", NVML_CLOCK_MEM: "mem", NVML_CLOCK_GRAPHICS: "sm"}.get(
            clock_type
        )
        if key is None:
            with self._lock:
                self._raise("INVALID_ARGUMENT")
        assert key is not None
        return int(self._field(handle, "nvmlDeviceGetClockInfo", "clocks_mhz", key, cycle=True))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie", "gen"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetCurrPcieLinkWidth", "pcie", "width"))

    # ---------------------------------------------------------------- modes
    def nvmlDeviceGetDisplayMode(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetDisplayMode", "display_mode"))

    def nvmlDeviceGetDisplayActive(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetDisplayActive", "display_active"))

    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        current, pending = self._field(handle, "nvmlDeviceGetEccMode", "ecc_mode")
        return [int(current), int(pending)]

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        current, pending = self._field(handle, "nvmlDeviceGetMigMode", "mig_mode")
        return [int(current), int(pending)]

    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(self._field(handle, "nvmlDeviceGetPersistenceMode", "persistence_mode"))

    # ---------------------------------------------------------------- topology
    def _link(self, handle_a: Any, handle_b: Any, function: str) -> Mapping[str, Any]:
        """The snapshot's ``links`` entry for two devices (either order); NOT_SUPPORTED when
        the snapshot records none."""
        with self._lock:
            a = self._device(handle_a, function)
            b = self._device(handle_b, function)
            for link in self.snapshot.get("links", []):
                pair = {int(i) for i in link.get("devices", ())}
                if pair == {a.index, b.index}:
                    return link
        self._raise("NOT_SUPPORTED")
        raise AssertionError  # unreachable

    def nvmlDeviceGetTopologyCommonAncestor(self, handle_a: Any, handle_b: Any) -> int:
        link = self._link(handle_a, handle_b, "nvmlDeviceGetTopologyCommonAncestor")
        if link.get("topology") is None:
            self._raise("NOT_SUPPORTED")
        return int(link["topology"])

    def nvmlDeviceGetP2PStatus(self, handle_a: Any, handle_b: Any, caps_index: int) -> int:
        link = self._link(handle_a, handle_b, "nvmlDeviceGetP2PStatus")
        names = {0: "read", 1: "write", 2: "nvlink", 3: "atomics", 4: "pci"}
        status = link.get("p2p", {}).get(names.get(int(caps_index), "?"))
        if status is None:
            return NVML_P2P_STATUS_UNKNOWN
        return int(status)

    # ---------------------------------------------------------------- processes
    def _processes(self, handle: Any, function: str, key: str) -> list[SimpleNamespace]:
        with self._lock:
            h = self._device(handle, function)
            return [
                SimpleNamespace(
                    pid=int(p["pid"]),
                    # pynvml turns NVML_VALUE_NOT_AVAILABLE (WDDM, WSL2) into None
                    usedGpuMemory=None if p.get("used_bytes") is None else int(p["used_bytes"]),
                    gpuInstanceId=0xFFFFFFFF,
                    computeInstanceId=0xFFFFFFFF,
                )
                for p in h.data.get(key, [])
            ]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        return self._processes(handle, "nvmlDeviceGetComputeRunningProcesses", "compute_processes")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[SimpleNamespace]:
        return self._processes(
            handle, "nvmlDeviceGetGraphicsRunningProcesses", "graphics_processes"
        )

    # ---------------------------------------------------------------- host side
    def read_process(self, pid: int) -> RecordedHostProcess | None:
        """The host process ``pid`` as recorded, or None when it is gone (like NoSuchProcess)."""
        entry = self.snapshot.get("host_processes", {}).get(str(pid))
        if entry is None:
            return None
        return RecordedHostProcess(
            pid=pid, name=str(entry.get("name", "")), cmdline=tuple(entry.get("cmdline", ()))
        )


def snapshot_names() -> tuple[str, ...]:
    """Names of the snapshots shipped with kvpilot (``rtx4090-desktop``, ...), sorted."""
    root = resources.files("kvpilot.resources")
    names = [
        entry.name[len(SNAPSHOT_PREFIX) : -len(".json")]
        for entry in root.iterdir()
        if entry.name.startswith(SNAPSHOT_PREFIX) and entry.name.endswith(".json")
    ]
    return tuple(sorted(names))


def load_recorded(path_or_name: str | Path) -> RecordedNvml:
    """A :class:`RecordedNvml` replaying a snapshot file, or a shipped snapshot by name.

    ``path_or_name`` is a path to a JSON file, or a name such as ``rtx4090-desktop`` (the file
    ``nvml_rtx4090-desktop.json`` among kvpilot's resources).

    Raises:
        HardwareError: the file does not exist, is not JSON, or the name is unknown (the message
            lists the shipped names).
    """
    from kvpilot.core.base.errors import HardwareError

    text: str
    source = str(path_or_name)
    path = Path(path_or_name)
    if path.suffix == ".json" or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise HardwareError(f"cannot read GPU snapshot {path}: {exc.strerror}") from exc
    else:
        entry = resources.files("kvpilot.resources") / f"{SNAPSHOT_PREFIX}{path_or_name}.json"
        if not entry.is_file():
            known = ", ".join(snapshot_names()) or "none"
            raise HardwareError(
                f"unknown GPU snapshot '{path_or_name}': use a .json file or one of: {known}"
            )
        text = entry.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HardwareError(f"GPU snapshot {source} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise HardwareError(f"GPU snapshot {source} must be a JSON object")
    return RecordedNvml(data, source=source)
