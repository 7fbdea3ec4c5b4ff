"""The device a plan, a launch and a measurement are for: one type, three ways to build it.

:class:`DeviceTarget` is built here from what this machine's NVML said (a probe result, or one
recorded snapshot replayed by ``--fake-gpu``), from the spec table in planner mode (``--gpu
'RTX 4090'``, ``2x RTX 4090``), from a size the user typed (``--gpu-total-mib``), or for vLLM's CPU
backend (the RAM). ``kvpilot plan``, ``recommend``, ``serve``, ``export``, ``watch`` and the window
all plan against it, so they budget alike.

Every budget uses ``total_bytes``: the total CUDA reports (``cudaMemGetInfo``), which is what vLLM
multiplies by ``gpu_memory_utilization``. On Linux it is NVML's total less the driver-reserved part
(an RTX 4090: 24,564 MiB in ``nvidia-smi``, 23.65 GiB in vLLM's log); under WSL2 it is NVML's total.
``nvml_total_bytes`` is only shown. Planner mode takes the CUDA total from the spec table for this
machine's platform (:meth:`kvpilot.core.hardware.specs.GpuSpec.cuda_total`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import CPU_DEVICE_NAME, GpuTarget, PlanInputs
from kvpilot.core.fit.parallel import GpuSet, is_consumer, parse_gpu_names, per_gpu
from kvpilot.core.hardware import specs
from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult, memory_holders
from kvpilot.core.hardware.specs import PLATFORM_LINUX, PLATFORM_WSL2, GpuSpec

if TYPE_CHECKING:
    from kvpilot.core.base.model_spec import ModelSpec
    from kvpilot.core.base.plan import ServingSettings

#: where ``total_bytes`` came from, for a target read from NVML
TOTAL_FROM_NVML = "CUDA total: NVML's total less its reserved memory"


@dataclass(frozen=True)
class DeviceTarget:
    """The GPU (or GPUs, or vLLM's CPU backend) a plan is for. Memory in bytes per GPU.

    ``total_bytes`` is the CUDA-visible total every budget uses; ``nvml_total_bytes`` is what
    ``nvidia-smi`` shows (None where not known); ``total_source`` says where ``total_bytes``
    came from. ``free_bytes`` is None in planner mode. ``detected`` is True when the target was
    read from this machine (NVML, a replayed snapshot or the RAM). ``gpu_indices``/``uuids``
    name this machine's GPUs in use (empty in planner mode); ``gpu_set`` is set for two or more
    cards, whose per-rank minimum the other fields hold.
    """

    name: str
    total_bytes: int
    free_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    _: KW_ONLY
    nvml_total_bytes: int | None = None
    total_source: str = ""
    bandwidth_bytes_per_s: float | None = None
    bf16_dense_tflops: float | None = None
    #: (process name, bytes) holding memory when ``free_bytes`` was read, largest first
    memory_holders: tuple[tuple[str, int], ...] = ()
    drives_display: bool = False
    detected: bool = False
    gpu_indices: tuple[int, ...] = ()
    uuids: tuple[str, ...] = ()
    #: how several GPUs all-reduce (``nvlink``, ``p2p``, ``host``; None: one GPU or unknown)
    allreduce: str | None = None
    gpu_set: GpuSet | None = None
    spec: GpuSpec | None = None
    snapshot: GpuSnapshot | None = None
    platform: str = PLATFORM_LINUX

    @property
    def count(self) -> int:
        """How many GPUs the plan spans (1 unless several were selected or named)."""
        if self.gpu_set is not None:
            return len(self.gpu_set.cards)
        return max(1, len(self.gpu_indices))

    @property
    def cuda_visible_devices(self) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` naming the GPUs in use by UUID (None: not this machine's)."""
        return ",".join(self.uuids) if self.uuids else None

    @property
    def is_cpu(self) -> bool:
        """True for vLLM's CPU backend (the RAM is the memory)."""
        return self.name == CPU_DEVICE_NAME

    @property
    def measured(self) -> bool:
        """True when the free memory was read from this machine's GPU (not planner mode)."""
        return self.detected and not self.is_cpu and self.free_bytes is not None

    @property
    def under_wsl2(self) -> bool:
        """True when the GPU is reached through WSL2 (``platform`` is ``wsl2``)."""
        return self.platform == PLATFORM_WSL2

    @property
    def short_name(self) -> str:
        """``RTX 4090`` for ``NVIDIA GeForce RTX 4090``."""
        return self.name.replace("NVIDIA ", "").replace("GeForce ", "")

    def card(self) -> GpuTarget:
        """The fit engine's per-GPU view of this target (what the recommender ranks on)."""
        return GpuTarget(
            name=self.name, total_bytes=self.total_bytes, free_bytes=self.free_bytes,
            compute_capability=self.compute_capability,
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s,
            bf16_dense_tflops=self.bf16_dense_tflops, memory_holders=self.memory_holders,
            drives_display=self.drives_display,
            under_wsl2=self.under_wsl2,
            index=self.gpu_indices[0] if self.gpu_indices else None,
            uuid=self.uuids[0] if self.uuids else None,
        )

    def plan_inputs(
        self, model: ModelSpec, vllm_version: str, settings: ServingSettings
    ) -> PlanInputs:
        """The fit engine's inputs for ``model`` served with ``settings`` by ``vllm_version``
        on this target (its CUDA total, free memory now, what holds it, how its GPUs
        all-reduce)."""
        from kvpilot.core.base.plan import settings_dict
        from kvpilot.core.hub.draft import draft_spec

        return PlanInputs.on_gpu(
            model, self, vllm_version=vllm_version, gpu_allreduce=self.allreduce,
            draft_model=draft_spec(settings.speculative_config),
            **settings_dict(settings),
        )


def current_platform(proc_version: Path = Path("/proc/version"),
                     environ: dict[str, str] | None = None) -> str:
    """``wsl2`` under Windows Subsystem for Linux, else ``linux``."""
    from kvpilot.core.hardware.system import detect_wsl

    try:
        text: str | None = proc_version.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = None
    env = dict(os.environ) if environ is None else environ
    return PLATFORM_WSL2 if detect_wsl(text, env) else PLATFORM_LINUX


def platform_of(gpu: GpuSnapshot, host_is_wsl2: bool) -> str:
    """``wsl2`` when this machine runs under WSL2 (``host_is_wsl2``, the probe's reading), or
    when the driver reports no per-process memory on ``gpu`` (Windows' WDDM driver, which WSL2
    goes through, reports none: a replayed WSL2 snapshot); else ``linux``."""
    if host_is_wsl2 or gpu.process_memory_reported is False:
        return PLATFORM_WSL2
    return PLATFORM_LINUX


def _spec_of(gpu: GpuSnapshot) -> GpuSpec | None:
    return specs.lookup(gpu.pci_device_id, gpu.name, memory_total_bytes=gpu.memory_total_bytes)


def from_snapshot(gpu: GpuSnapshot, host_is_wsl2: bool = False) -> DeviceTarget:
    """One GPU as NVML read it (a probe or a replayed snapshot), with its free memory now;
    ``host_is_wsl2`` is the probe's reading of this machine (:func:`platform_of`).

    Raises:
        FitError: NVML gave no memory total for it (a lost or unreadable GPU).
    """
    if not gpu.memory_total_bytes or gpu.lost:
        raise FitError(
            f"GPU {gpu.index} reported no memory total (lost or unreadable); "
            "see `kvpilot gpu`, or plan with --gpu NAME"
        )
    from kvpilot.core.hardware.selection import drives_display

    spec = _spec_of(gpu)
    return DeviceTarget(
        name=gpu.name or "GPU",
        total_bytes=int(gpu.cuda_total_bytes or 0),
        free_bytes=gpu.memory_free_bytes,
        compute_capability=gpu.compute_capability,
        nvml_total_bytes=gpu.memory_total_bytes,
        total_source=TOTAL_FROM_NVML if gpu.memory_reserved_bytes else
        "NVML's total (the driver reported no reserved memory)",
        bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s if spec else None,
        bf16_dense_tflops=spec.bf16_dense_tflops if spec else None,
        memory_holders=memory_holders(gpu),
        drives_display=drives_display(gpu),
        platform=platform_of(gpu, host_is_wsl2),
        detected=True,
        gpu_indices=(gpu.index,),
        uuids=(gpu.uuid or str(gpu.index),),
        spec=spec,
        snapshot=gpu,
    )


def from_probe(result: ProbeResult, indices: Sequence[int] | None = None) -> DeviceTarget:
    """This machine's GPUs ``indices`` (default: GPU 0). One GPU as it is; several as one
    per-rank target (the smallest card bounds each rank) carrying their :class:`GpuSet`.

    Raises:
        HardwareError: no GPU was read, or an index NVML does not report.
        FitError: a chosen GPU reported no memory total.
    """
    from kvpilot.core.hardware.selection import select_gpus

    wanted = tuple(indices) if indices else ((result.gpus[0].index,) if result.gpus else (0,))
    gpus = select_gpus(result, wanted)
    targets = [from_snapshot(g, result.system.is_wsl2) for g in gpus]
    if len(targets) == 1:
        return targets[0]
    links = [result.link(a.index, b.index) for i, a in enumerate(gpus) for b in gpus[i + 1:]]
    gpu_set = GpuSet(
        tuple(t.card() for t in targets),
        p2p=_every([x.p2p if x else None for x in links]),
        nvlink=_every([x.nvlink if x else None for x in links]),
    )
    smallest = min(targets, key=lambda t: t.total_bytes)
    holders = tuple(sorted((h for t in targets for h in t.memory_holders), key=lambda h: -h[1]))
    return replace(
        _over_set(smallest, gpu_set),
        memory_holders=holders,
        gpu_indices=tuple(t.gpu_indices[0] for t in targets),
        uuids=tuple(t.uuids[0] for t in targets),
    )


def _over_set(target: DeviceTarget, gpu_set: GpuSet) -> DeviceTarget:
    """``target`` (one card of ``gpu_set``) as the target of the whole set: the set's name, what
    each rank can count on (:func:`~kvpilot.core.fit.parallel.per_gpu`) and how the ranks
    all-reduce."""
    per = per_gpu(gpu_set.cards)
    return replace(
        target, name=gpu_set.label, total_bytes=per.total_bytes, free_bytes=per.free_bytes,
        compute_capability=per.compute_capability,
        bandwidth_bytes_per_s=per.bandwidth_bytes_per_s,
        bf16_dense_tflops=per.bf16_dense_tflops, drives_display=per.drives_display,
        allreduce=gpu_set.allreduce_path(len(gpu_set.cards)), gpu_set=gpu_set,
    )


def _every(values: list[bool | None]) -> bool | None:
    """True when every GPU pair has a link, False when one lacks it, None when one is unknown
    (or there is no pair)."""
    if not values or (any(v is None for v in values) and not any(v is False for v in values)):
        return None
    return all(values)


def _unknown_gpu(name: str) -> FitError:
    known = ", ".join(sorted({s.short_name for s in specs.all_specs()}))
    return FitError(f"unknown GPU '{name}'; known: {known}")


def spec_card(spec: GpuSpec, platform: str = PLATFORM_LINUX) -> GpuTarget:
    """The fit engine's card for a spec-table board on ``platform`` (its CUDA total)."""
    total, _ = spec.cuda_total(platform)
    return GpuTarget(spec.name, total, None, spec.compute_capability,
                     spec.bandwidth_bytes_per_s, spec.bf16_dense_tflops,
                     under_wsl2=platform == PLATFORM_WSL2)


def gpu_set_from_names(text: str, platform: str = PLATFORM_LINUX) -> GpuSet:
    """Planner mode: a set from spec-table names (``2x RTX 4090``, ``RTX 4090 + RTX 3090``),
    each card with its CUDA total on ``platform``. Consumer cards have no peer-to-peer (NVIDIA
    does not offer it on GeForce cards); for others it is unknown.

    Raises:
        FitError: an unknown GPU name (the message lists the known ones).
    """
    cards = []
    for name in parse_gpu_names(text):
        spec = specs.lookup(None, name)
        if spec is None:
            raise _unknown_gpu(name)
        cards.append(spec_card(spec, platform))
    consumer = all(is_consumer(c.name) for c in cards)
    return GpuSet(tuple(cards), p2p=False if consumer else None,
                  nvlink=False if consumer else None)


def from_spec(name: str, platform: str | None = None) -> DeviceTarget:
    """Planner mode: one spec-table card (``RTX 4090``) or several (``2x RTX 4090``,
    ``RTX 4090 + RTX 3090``), budgeted on the CUDA total of ``platform`` (default: this
    machine's, :func:`current_platform`). Nothing is measured: ``free_bytes`` is None.

    Raises:
        FitError: a name the spec table does not know (the message lists the known ones).
    """
    where = platform or current_platform()
    names = parse_gpu_names(name)
    if len(names) > 1:
        gpu_set = gpu_set_from_names(name, where)  # raises for an unknown name
        boards = [s for s in (specs.lookup(None, n) for n in names) if s is not None]
        return replace(
            _over_set(_spec_target(boards[0], where), gpu_set),
            nvml_total_bytes=min(s.memory_total_bytes for s in boards),
        )
    spec = specs.lookup(None, name)
    if spec is None:
        raise _unknown_gpu(name)
    return _spec_target(spec, where)


def _spec_target(spec: GpuSpec, platform: str) -> DeviceTarget:
    """Planner mode: the target of one spec-table board on ``platform`` (its CUDA total)."""
    total, source = spec.cuda_total(platform)
    return DeviceTarget(
        name=spec.name, total_bytes=total, free_bytes=None,
        compute_capability=spec.compute_capability, nvml_total_bytes=spec.memory_total_bytes,
        total_source=source, bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s,
        bf16_dense_tflops=spec.bf16_dense_tflops, spec=spec, platform=platform,
    )


def from_size(total_bytes: int, free_bytes: int | None = None, *, name: str = "gpu",
              compute_capability: tuple[int, int] | None = None) -> DeviceTarget:
    """A GPU the user described by its size (``--gpu-total-mib``): taken as the CUDA total.

    Raises:
        FitError: a size that is not positive, or free memory that is negative.
    """
    if total_bytes <= 0:
        raise FitError("--gpu-total-mib must be positive")
    if free_bytes is not None and free_bytes < 0:
        raise FitError("--gpu-free-mib must not be negative")
    spec = specs.lookup(None, name) if name and name != "gpu" else None
    return DeviceTarget(
        name=name, total_bytes=total_bytes, free_bytes=free_bytes,
        compute_capability=compute_capability or (spec.compute_capability if spec else None),
        total_source="the size given on the command line",
        bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s if spec else None,
        bf16_dense_tflops=spec.bf16_dense_tflops if spec else None, spec=spec,
    )


def cpu_target() -> DeviceTarget:
    """vLLM's CPU backend on this machine: the RAM is its memory."""
    import psutil

    return DeviceTarget(CPU_DEVICE_NAME, int(psutil.virtual_memory().total),
                        total_source="this machine's RAM", detected=True)
