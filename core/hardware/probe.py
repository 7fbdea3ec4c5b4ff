"""One look at the GPUs and the machine: :func:`probe` -> :class:`ProbeResult`.

Everything is read in one NVML session into frozen records. ``probe`` never raises for hardware
trouble: a missing driver, a version mismatch or no permission come back as
``ProbeResult.error`` (a :class:`HardwareProblem` with a fix), a field this GPU cannot report is
None, a GPU that stops answering is marked ``lost``. Sizes are bytes, power watts, clocks MHz.

Memory follows NVML's v2 query where the driver has it: ``memory_reserved_bytes`` is what the
driver keeps for itself, ``memory_used_bytes`` what processes (and the driver's per-context
bookkeeping) hold, and total = reserved + used + free. With the older v1 query the reserved part
is unknown (None) and included in ``memory_used_bytes``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import psutil

from kvpilot.core.base.throttle import MASK_FUNCTIONS
from kvpilot.core.fit.budget_now import GpuMemoryNow
from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.nvml import GpuLostError, Nvml, NvmlInitError
from kvpilot.core.hardware.problems import HardwareProblem, ProblemKind
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.system import SystemSnapshot, read_system

__all__ = [
    "GpuProcess",
    "GpuSnapshot",
    "HardwareProblem",
    "ProbeResult",
    "ProblemKind",
    "ProcessInfo",
    "ProcessReader",
    "SystemSnapshot",
    "probe",
    "read_gpu",
]

ProcessKind = Literal["compute", "graphics", "compute+graphics"]

#: pid -> (name, command line), or None when the process is gone or invisible from here
ProcessReader = Callable[[int], "tuple[str | None, tuple[str, ...]] | None"]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU.

    ``used_bytes`` is None when the driver does not report per-process memory (WSL2, Windows
    WDDM): "not reported", which is not the same as 0. ``host_visible`` is False when the
    process could not be read on this host (it exited meanwhile, or it lives in another PID
    namespace / on the Windows side of WSL2); ``name`` may then come from NVML or be None.
    """

    pid: int
    name: str | None
    cmdline: tuple[str, ...]
    used_bytes: int | None
    kind: ProcessKind
    host_visible: bool = True


#: the name used in the issue text
ProcessInfo = GpuProcess


@dataclass(frozen=True)
class GpuSnapshot:
    """One GPU at one moment (None: not reported by this GPU/driver).

    ``throttle_reasons_mask`` is NVML's clock-event reason bits (see
    :mod:`kvpilot.core.base.throttle`); ``energy_mj`` the millijoules the GPU used since
    the driver loaded (NVML's energy counter, on Volta and newer).
    """

    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    pci_device_id: str | None = None  # "0x2684": the PCI device id (vendor part removed)
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    bar1_total_bytes: int | None = None
    bar1_used_bytes: int | None = None
    gpu_util_percent: int | None = None
    mem_util_percent: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons_mask: int | None = None
    energy_mj: int | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    display_attached: bool | None = None
    display_active: bool | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    persistence_enabled: bool | None = None
    processes: tuple[GpuProcess, ...] = ()
    unavailable_fields: tuple[str, ...] = ()
    lost: bool = False

    @property
    def cuda_total_bytes(self) -> int | None:
        """Total memory as CUDA (and so vLLM) counts it: NVML total minus the reserved part.

        vLLM applies ``gpu_memory_utilization`` to ``cudaMemGetInfo``'s total, which leaves out
        what NVML reports as reserved (an RTX 4090: NVML 24564 MiB, vLLM logs 23.65 GiB). When
        the reserved size is unknown the NVML total is returned, which overstates vLLM's total
        a little and so errs on the safe side for start-up budgets.
        """
        if self.memory_total_bytes is None:
            return None
        return self.memory_total_bytes - (self.memory_reserved_bytes or 0)

    @property
    def process_memory_reported(self) -> bool | None:
        """Whether the driver reports per-process memory (None: no process to tell)."""
        if not self.processes:
            return None
        return any(p.used_bytes is not None for p in self.processes)

    @property
    def processes_used_bytes(self) -> int | None:
        """Sum of per-process memory, None when the driver reports none of it."""
        known = [p.used_bytes for p in self.processes if p.used_bytes is not None]
        return sum(known) if known else (0 if not self.processes else None)


def memory_holders(gpu: GpuSnapshot, *, exclude_pids: frozenset[int] = frozenset()
                   ) -> tuple[tuple[str, int], ...]:
    """(process name, bytes) of the processes holding memory on ``gpu``, largest first.

    Processes whose memory the driver does not report (WSL2) are left out; a process without
    a readable name is called ``pid N``.
    """
    found = [
        (p.name or f"pid {p.pid}", int(p.used_bytes))
        for p in gpu.processes
        if p.used_bytes and p.pid not in exclude_pids
    ]
    return tuple(sorted(found, key=lambda item: -item[1]))


def memory_now(gpu: GpuSnapshot) -> GpuMemoryNow:
    """The plain memory reading of ``gpu`` that the fit engine's launch budget takes."""
    return GpuMemoryNow(
        gpu_index=gpu.index,
        total_bytes=gpu.cuda_total_bytes,
        free_bytes=gpu.memory_free_bytes,
        holders=memory_holders(gpu),
        process_count=len(gpu.processes),
        per_process_reported=gpu.process_memory_reported,
        lost=gpu.lost,
    )


@dataclass(frozen=True)
class GpuLink:
    """How two GPUs (NVML indices ``index_a`` < ``index_b``) reach each other.

    ``topology`` is NVML's common ancestor as ``nvidia-smi topo -m`` names it (``PIX``, ``PXB``,
    ``PHB``, ``NODE``, ``SYS``; None when unknown). ``p2p_read`` / ``p2p_write`` / ``nvlink``
    are True when NVML reports peer-to-peer access of that kind, False when it reports it
    unsupported (``p2p_reason`` then says why), None when it cannot say.
    """

    index_a: int
    index_b: int
    topology: str | None = None
    p2p_read: bool | None = None
    p2p_write: bool | None = None
    nvlink: bool | None = None
    p2p_reason: str | None = None

    @property
    def p2p(self) -> bool | None:
        """True when both directions work (what vLLM's custom all-reduce needs)."""
        if self.p2p_read is None or self.p2p_write is None:
            return None
        return self.p2p_read and self.p2p_write


@dataclass(frozen=True)
class ProbeResult:
    """Outcome of :func:`probe`.

    ``error`` is None when NVML worked; ``gpus`` is then non-empty. ``source`` is ``"nvml"`` or
    ``"replay of <snapshot>"``. The CUDA driver version is the one the driver supports, as
    ``"12.4"``.
    """

    gpus: tuple[GpuSnapshot, ...]
    system: SystemSnapshot
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    error: HardwareProblem | None = None
    source: str = "nvml"
    warnings: tuple[str, ...] = field(default=())
    links: tuple[GpuLink, ...] = field(default=())

    def link(self, index_a: int, index_b: int) -> GpuLink | None:
        """The link between two GPUs (either order), None when not read."""
        lo, hi = sorted((index_a, index_b))
        return next((x for x in self.links if (x.index_a, x.index_b) == (lo, hi)), None)

    @property
    def ok(self) -> bool:
        """True when at least one GPU was read and nothing stopped NVML."""
        return self.error is None and bool(self.gpus)


def cuda_version_text(value: int | None) -> str | None:
    """NVML's CUDA driver version integer (12040) as ``"12.4"``."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def pci_device_id_text(pci_device_id: int | None) -> str | None:
    """NVML's 32-bit ``pciDeviceId`` (device << 16 | vendor) as ``"0x2684"``."""
    if pci_device_id is None:
        return None
    return f"0x{(int(pci_device_id) >> 16) & 0xFFFF:04x}"


def psutil_process_reader(pid: int) -> tuple[str | None, tuple[str, ...]] | None:
    """Name and command line of ``pid`` via psutil; None when it is gone or not visible."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            name = proc.name()
            try:
                cmdline = tuple(proc.cmdline())
            except psutil.AccessDenied:
                cmdline = ()
    except psutil.NoSuchProcess:  # includes ZombieProcess: exited while being read
        return None
    except psutil.AccessDenied:
        return (None, ())
    return (name, cmdline)


def process_reader_for(module: object) -> ProcessReader:
    """The host-process reader matching an NVML module: the replay's table for a fake."""
    if isinstance(module, RecordedNvml):
        fake = module

        def read(pid: int) -> tuple[str | None, tuple[str, ...]] | None:
            proc = fake.read_process(pid)
            return None if proc is None else (proc.name, proc.cmdline)

        return read
    return psutil_process_reader


def _bool(value: object) -> bool | None:
    return None if value is None else bool(value)


_PROCESS_FUNCTIONS = {
    "compute": "nvmlDeviceGetComputeRunningProcesses",
    "graphics": "nvmlDeviceGetGraphicsRunningProcesses",
}


def running_processes(
    nv: Nvml, handle: object, kind: str, missing: list[str] | None = None
) -> list[Any]:
    """NVML's process entries (``pid``, ``usedGpuMemory``) of one kind: compute or graphics.

    Falls back to the ``_v2`` function when the binding's unversioned one is missing from an
    older driver. Empty (and ``"<kind>_processes"`` added to ``missing``) when unreadable.

    Raises:
        GpuLostError: the GPU stopped answering.
    """
    function = _PROCESS_FUNCTIONS[kind]
    label = f"{kind}_processes"
    entries = nv.call(function, handle, field=label)
    if entries is None and hasattr(nv.module, f"{function}_v2"):
        entries = nv.call(f"{function}_v2", handle, field=label)
    if entries is None:
        if missing is not None:
            missing.append(label)
        return []
    return list(entries)


def read_processes(
    nv: Nvml, handle: object, reader: ProcessReader, missing: list[str]
) -> tuple[GpuProcess, ...]:
    """Compute and graphics processes of one GPU, merged by pid (largest report wins).

    Raises:
        GpuLostError: the GPU stopped answering.
    """
    seen: dict[int, tuple[set[str], int | None]] = {}
    for list_kind in ("compute", "graphics"):
        for entry in running_processes(nv, handle, list_kind, missing):
            pid = int(entry.pid)
            used = entry.usedGpuMemory
            kinds, prev = seen.get(pid, (set(), None))
            kinds.add(list_kind)
            best = prev if used is None else used if prev is None else max(prev, int(used))
            seen[pid] = (kinds, None if best is None else int(best))
    out: list[GpuProcess] = []
    for pid, (kinds, used) in sorted(seen.items()):
        kind: ProcessKind = (
            "compute+graphics"
            if len(kinds) == 2
            else "compute"
            if "compute" in kinds
            else "graphics"
        )
        info = reader(pid)
        if info is None:
            name = nv.call("nvmlSystemGetProcessName", pid, field="process_name")
            out.append(GpuProcess(pid, name or None, (), used, kind, host_visible=False))
        else:
            out.append(GpuProcess(pid, info[0], info[1], used, kind))
    return tuple(out)


def read_gpu(nv: Nvml, index: int, reader: ProcessReader | None = None) -> GpuSnapshot:
    """Read every static and dynamic field of GPU ``index`` in one pass.

    Never raises for per-field trouble (None) or a lost GPU (``lost=True``).
    """
    reader = reader or process_reader_for(nv.module)
    missing: list[str] = []
    got: dict[str, Any] = {"index": index}
    try:
        h = nv.handle(index)
        call = nv.call
        got["name"] = call("nvmlDeviceGetName", h, field="name", missing=missing)
        got["uuid"] = call("nvmlDeviceGetUUID", h, field="uuid", missing=missing)
        pci = call("nvmlDeviceGetPciInfo", h, field="pci", missing=missing)
        if pci is not None:
            got["pci_bus_id"] = nvml_mod.decode_text(pci.busId)
            got["pci_device_id"] = pci_device_id_text(pci.pciDeviceId)
        got.update(read_memory(nv, h, missing))
        cc = call(
            "nvmlDeviceGetCudaComputeCapability", h, field="compute_capability", missing=missing
        )
        got["compute_capability"] = None if cc is None else (int(cc[0]), int(cc[1]))
        bar1 = call("nvmlDeviceGetBAR1MemoryInfo", h, field="bar1", missing=missing)
        if bar1 is not None:
            got["bar1_total_bytes"] = int(bar1.bar1Total)
            got["bar1_used_bytes"] = int(bar1.bar1Used)
        got.update(read_dynamic(nv, h, missing))
        gen = call("nvmlDeviceGetCurrPcieLinkGeneration", h, field="pcie_gen", missing=missing)
        width = call("nvmlDeviceGetCurrPcieLinkWidth", h, field="pcie_width", missing=missing)
        got["pcie_gen"], got["pcie_width"] = gen, width
        got["display_attached"] = _bool(
            call("nvmlDeviceGetDisplayMode", h, field="display_attached", missing=missing)
        )
        got["display_active"] = _bool(
            call("nvmlDeviceGetDisplayActive", h, field="display_active", missing=missing)
        )
        ecc = call("nvmlDeviceGetEccMode", h, field="ecc", missing=missing)
        got["ecc_enabled"] = None if ecc is None else bool(ecc[0])
        mig = call("nvmlDeviceGetMigMode", h, field="mig", missing=missing)
        got["mig_enabled"] = None if mig is None else bool(mig[0])
        got["persistence_enabled"] = _bool(
            call("nvmlDeviceGetPersistenceMode", h, field="persistence", missing=missing)
        )
        got["processes"] = read_processes(nv, h, reader, missing)
    except GpuLostError:
        got["lost"] = True
    got["unavailable_fields"] = tuple(dict.fromkeys(missing))
    return GpuSnapshot(**got)


def read_links(nv: Nvml, count: int) -> tuple[GpuLink, ...]:
    """The topology and P2P status of every pair of GPUs (nothing for one GPU).

    Raises:
        GpuLostError: a GPU does not answer.
    """
    links: list[GpuLink] = []
    for a in range(count):
        for b in range(a + 1, count):
            ha, hb = nv.handle(a), nv.handle(b)
            level = nvml_mod.topology_level(nv, ha, hb)
            status = {cap: nvml_mod.p2p_status(nv, ha, hb, cap) for cap in nvml_mod.P2P_CAPS}

            def ok(value: int | None) -> bool | None:
                if value is None or value == 6:  # NVML_P2P_STATUS_UNKNOWN
                    return None
                return value == nvml_mod.P2P_STATUS_OK

            reason = next(
                (nvml_mod.P2P_STATUS_WORDS.get(v, "unknown") for v in
                 (status["read"], status["write"]) if v not in (None, 0, 6)), None
            )
            links.append(GpuLink(
                index_a=a, index_b=b,
                topology=None if level is None else nvml_mod.TOPOLOGY_NAMES.get(level),
                p2p_read=ok(status["read"]), p2p_write=ok(status["write"]),
                nvlink=ok(status["nvlink"]), p2p_reason=reason,
            ))
    return tuple(links)


def read_memory(nv: Nvml, handle: object, missing: list[str] | None = None) -> dict[str, Any]:
    """Memory via the v2 query (reserved separated) with a fallback to v1.

    Raises:
        GpuLostError: the GPU stopped answering.
    """
    version = getattr(nv.module, "nvmlMemory_v2", None)
    mem = None
    if version is not None and nv.memory_v2 is not False:
        mem = nv.call("nvmlDeviceGetMemoryInfo", handle, version, field="memory_v2")
        nv.memory_v2 = mem is not None  # remembered: a v1-only driver is asked once per session
    if mem is not None:
        return {
            "memory_total_bytes": int(mem.total),
            "memory_reserved_bytes": int(mem.reserved),
            "memory_used_bytes": int(mem.used),
            "memory_free_bytes": int(mem.free),
        }
    mem = nv.call("nvmlDeviceGetMemoryInfo", handle, field="memory", missing=missing)
    if mem is None:
        return {}
    if missing is not None:
        missing.append("memory_reserved")
    return {
        "memory_total_bytes": int(mem.total),
        "memory_used_bytes": int(mem.used),
        "memory_free_bytes": int(mem.free),
    }


#: the dynamic readings that name what to read by an NVML constant:
#: result key -> (function, constant, its value where the module lacks it, field name)
_BY_CONSTANT: dict[str, tuple[str, str, int, str]] = {
    "temperature_c": ("nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", 0, "temperature"),
    "sm_clock_mhz": ("nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", 1, "sm_clock"),
    "mem_clock_mhz": ("nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM", 2, "mem_clock"),
}


def read_throttle_mask(nv: Nvml, handle: object, missing: list[str] | None = None) -> int | None:
    """NVML's clock-event reason mask, from the first of :data:`MASK_FUNCTIONS` that answers
    (the one that did is remembered for the session). None, and ``"throttle_reasons"`` added to
    ``missing``, when neither does.

    Raises:
        GpuLostError: the GPU stopped answering.
    """
    functions = MASK_FUNCTIONS if nv.throttle_function is None else (nv.throttle_function,)
    for function in functions:
        if getattr(nv.module, function, None) is None:
            continue
        value = nv.call(function, handle, field="throttle_reasons")
        if value is not None:
            nv.throttle_function = function
            return int(value)
    if missing is not None:
        missing.append("throttle_reasons")
    return None


def read_dynamic(nv: Nvml, handle: object, missing: list[str] | None = None) -> dict[str, Any]:
    """Utilization, temperature, power draw and limit, clocks, the throttle mask and the energy
    counter (the sampler's fields besides memory). Watts, MHz, millijoules.

    Raises:
        GpuLostError: the GPU stopped answering.
    """
    call = nv.call
    util = call("nvmlDeviceGetUtilizationRates", handle, field="utilization", missing=missing)
    power = call("nvmlDeviceGetPowerUsage", handle, field="power", missing=missing)
    limit = call("nvmlDeviceGetEnforcedPowerLimit", handle, field="power_limit", missing=missing)
    energy = call(
        "nvmlDeviceGetTotalEnergyConsumption", handle, field="energy", missing=missing
    )
    values: dict[str, Any] = {
        "gpu_util_percent": None if util is None else int(util.gpu),
        "mem_util_percent": None if util is None else int(util.memory),
        "power_w": None if power is None else power / 1000.0,
        "power_limit_w": None if limit is None else limit / 1000.0,
        "throttle_reasons_mask": read_throttle_mask(nv, handle, missing),
        "energy_mj": None if energy is None else int(energy),
    }
    for key, (function, constant, fallback, field_name) in _BY_CONSTANT.items():
        values[key] = call(
            function, handle, nv.constant(constant, fallback), field=field_name, missing=missing
        )
    return values


def probe(
    nvml_module: object | None = None,
    *,
    model_dir: str | os.PathLike[str] | None = None,
    process_reader: ProcessReader | None = None,
    system: SystemSnapshot | None = None,
) -> ProbeResult:
    """Read all GPUs and the host now.

    Args:
        nvml_module: the NVML module (default: ``$KVPILOT_FAKE_NVML`` replay or ``pynvml``).
        model_dir: a directory whose free disk space should be reported.
        process_reader: pid -> (name, cmdline) or None (default: psutil, or the replay's table).
        system: a ready :class:`SystemSnapshot` (default: read now).

    Never raises for hardware problems; see :class:`ProbeResult`.

    Raises:
        HardwareError: ``$KVPILOT_FAKE_NVML`` names no readable snapshot.
    """
    sysinfo = system if system is not None else read_system(model_dir)
    try:
        module = nvml_mod.resolve_module(nvml_module)
    except NvmlInitError as exc:
        return ProbeResult(gpus=(), system=sysinfo, error=exc.problem)
    source = nvml_mod.describe_source(module)
    nv = Nvml(module)
    try:
        nv.open()
    except NvmlInitError as exc:
        return ProbeResult(gpus=(), system=sysinfo, error=exc.problem, source=source)
    try:
        versions = {
            "driver_version": nv.call("nvmlSystemGetDriverVersion", field="driver_version"),
            "nvml_version": nv.call("nvmlSystemGetNVMLVersion", field="nvml_version"),
            "cuda_driver_version": cuda_version_text(
                nv.call("nvmlSystemGetCudaDriverVersion", field="cuda_driver_version")
            ),
        }
        try:
            count = nv.device_count()
        except NvmlInitError as exc:
            return ProbeResult(
                gpus=(), system=sysinfo, error=exc.problem, source=source, **versions
            )
        if count == 0:
            problem = HardwareProblem.of(ProblemKind.NO_DEVICES)
            return ProbeResult(gpus=(), system=sysinfo, error=problem, source=source, **versions)
        reader = process_reader or process_reader_for(module)
        gpus = tuple(read_gpu(nv, i, reader) for i in range(count))
        try:
            links = read_links(nv, count) if not any(g.lost for g in gpus) else ()
        except (GpuLostError, NvmlInitError):
            links = ()
    except GpuLostError as exc:  # a system-level call hit a lost GPU
        return ProbeResult(gpus=(), system=sysinfo, error=exc.problem, source=source)
    finally:
        nv.close()
    error = None
    if all(g.lost for g in gpus):
        error = HardwareProblem.of(ProblemKind.GPU_LOST, "no GPU answers")
    warnings = tuple(
        f"GPU {g.index} stopped answering (fallen off the bus?)" for g in gpus if g.lost
    )
    return ProbeResult(
        gpus=gpus, system=sysinfo, error=error, source=source, warnings=warnings,
        links=links, **versions,
    )
