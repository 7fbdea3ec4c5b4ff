"""The serving flags and the device that ``plan``, ``recommend`` and ``serve`` share.

Every command that plans or launches takes the same ``vllm serve`` settings
(:func:`add_serving_arguments` -> :func:`settings_from_args`, one
:class:`~kvpilot.core.fit.plan.ServingSettings`) and plans for the same device by default
(:func:`device_from_args`): the GPU named on the command line; else the NVIDIA GPU NVML reports;
else, when the vLLM that would run is its CPU build, vLLM's CPU backend with the RAM as its memory.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kvpilot.core.errors import FitError
from kvpilot.core.fit.plan import CPU_DEVICE_NAME, PlanInputs, ServingSettings, settings_dict
from kvpilot.core.models.spec import ModelSpec
from kvpilot.core.units import MiB
from kvpilot.core.vllm.versions import Release


def parse_size(text: str) -> int:
    """Bytes from ``1073741824``, ``64M``/``1G`` (binary) or ``64m``/``1g`` (decimal), as vLLM.

    Raises:
        argparse.ArgumentTypeError: not a size.
    """
    decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
    raw = text.strip()
    try:
        if raw and raw[-1] in "KMGT":
            return int(float(raw[:-1]) * (1 << (10 * ("KMGT".index(raw[-1]) + 1))))
        if raw and raw[-1] in decimal:
            return int(float(raw[:-1]) * decimal[raw[-1]])
        return int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; use bytes or a suffix like 64M or 2G"
        ) from None


def parse_mm_limit(text: str) -> int:
    """Images per prompt from ``2``, vLLM's JSON ``{"image": 2}`` or the old ``image=2``.

    Raises:
        argparse.ArgumentTypeError: not a whole number of images.
    """
    import json

    raw = text.strip()
    value: object = raw
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            data = None
        value = data.get("image") if isinstance(data, dict) else None
    elif "=" in raw:
        pairs = dict(p.split("=", 1) for p in raw.split(",") if "=" in p)
        value = pairs.get("image")
    try:
        count = int(str(value))
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of images per prompt; give e.g. 1, or 0 for text only"
        )
    return count


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--gpu``, ``--gpu-total-mib``, ``--gpu-free-mib`` (default: this machine's device)."""
    parser.add_argument("--gpu", help="GPU name from the spec table, e.g. 'RTX 4090' "
                        "(default: the GPU of this machine)")
    parser.add_argument("--gpu-total-mib", type=int, help="GPU memory in MiB (as nvidia-smi)")
    parser.add_argument("--gpu-free-mib", type=int, help="free GPU memory now, in MiB")
    pick = parser.add_mutually_exclusive_group()
    pick.add_argument("--gpu-index", type=int, metavar="N",
                      help="this machine's GPU N (NVML order, as `kvpilot gpu` lists them)")
    pick.add_argument("--gpus", metavar="LIST",
                      help="this machine's GPUs, e.g. 0,1 (tensor parallel over all of them)")


def add_serving_arguments(
    parser: argparse.ArgumentParser, *, with_length_and_seqs: bool = True
) -> None:
    """The ``vllm serve`` settings that decide memory, spelled as vLLM spells them."""
    if with_length_and_seqs:
        parser.add_argument("--max-model-len", type=int)
        parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--kv-cache-memory-bytes", type=parse_size,
                        help="fixed KV cache size (e.g. 8G); replaces the utilization budget")
    parser.add_argument("--quantization")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                        default=None, help="(default: vLLM's, on for generative models)")
    parser.add_argument("--dtype", help="activation dtype (default: the checkpoint's)")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--limit-mm-per-prompt", type=parse_mm_limit, metavar="IMAGES",
                        help="images per prompt for a vision model (0 = text only: no "
                        "encoder profile; default: vLLM's)")


def settings_from_args(args: argparse.Namespace) -> ServingSettings:
    """The :class:`ServingSettings` the flags of :func:`add_serving_arguments` give.

    Raises:
        FitError: a size or count that is not positive.
    """
    for flag in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
                 "tensor_parallel_size"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise FitError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    return ServingSettings(
        max_model_len=getattr(args, "max_model_len", None),
        max_num_seqs=getattr(args, "max_num_seqs", None),
        max_num_batched_tokens=args.max_num_batched_tokens,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        kv_cache_dtype=args.kv_cache_dtype or "auto",
        quantization=args.quantization,
        enforce_eager=args.enforce_eager,
        enable_prefix_caching=args.enable_prefix_caching,
        tensor_parallel_size=args.tensor_parallel_size,
        dtype=args.dtype,
        block_size=args.block_size,
        limit_mm_per_prompt=getattr(args, "limit_mm_per_prompt", None),
    )


@dataclass(frozen=True)
class Device:
    """The device a plan is for. Bytes; ``name`` is ``cpu`` for vLLM's CPU backend.

    ``detected`` is True when it was read from this machine (NVML or the RAM), False when the
    command line named it.
    """

    name: str
    total_bytes: int
    free_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    detected: bool = False
    #: (process name, bytes) holding memory when ``free_bytes`` was read, largest first
    memory_holders: tuple[tuple[str, int], ...] = ()
    index: int | None = None
    #: the NVML indices and UUIDs of this machine's GPUs in use (empty: not this machine's)
    indices: tuple[int, ...] = ()
    uuids: tuple[str, ...] = ()
    #: how several GPUs all-reduce (``nvlink``, ``p2p``, ``host``; None: one GPU or unknown)
    allreduce: str | None = None

    @property
    def count(self) -> int:
        """How many GPUs the plan spans (1 unless several were selected)."""
        return max(1, len(self.indices))

    @property
    def cuda_visible_devices(self) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` naming the GPUs in use by UUID (None: not this machine's)."""
        return ",".join(self.uuids) if self.uuids else None

    @property
    def is_cpu(self) -> bool:
        return self.name == CPU_DEVICE_NAME

    def plan_inputs(
        self, model: ModelSpec, vllm_version: str, settings: ServingSettings
    ) -> PlanInputs:
        """The fit engine's inputs for ``model`` served with ``settings`` by ``vllm_version``
        on this device (its memory now, what holds it, how its GPUs all-reduce)."""
        return PlanInputs.on_gpu(
            model, self, vllm_version=vllm_version, gpu_allreduce=self.allreduce,
            **settings_dict(settings),
        )


def cpu_device() -> Device:
    """vLLM's CPU backend on this machine: the RAM is its memory."""
    import psutil

    return Device(CPU_DEVICE_NAME, int(psutil.virtual_memory().total), None, None, True)


def detected_gpu(indices: tuple[int, ...] | None = None) -> Device | None:
    """This machine's GPU(s) with their free memory now, or None when NVML reports none.

    ``indices`` selects GPUs by NVML index (default: GPU 0). Several GPUs make one device
    whose memory is that of the smallest (it bounds what each tensor-parallel rank holds).

    Raises:
        HardwareError: ``indices`` names a GPU NVML does not report.
    """
    from kvpilot.core.errors import HardwareError
    from kvpilot.core.hardware.probe import probe
    from kvpilot.core.hardware.selection import select_gpus

    try:
        result = probe()
    except HardwareError:
        if indices:
            raise
        return None
    if not result.ok or not result.gpus:
        if indices:
            select_gpus(result, indices)  # raises with the reason
        return None
    gpus = select_gpus(result, indices or (result.gpus[0].index,))
    if any(not g.memory_total_bytes for g in gpus):
        return None
    smallest = min(gpus, key=lambda g: int(g.memory_total_bytes or 0))
    names = [g.name or "gpu" for g in gpus]
    name = names[0] if len(set(names)) == 1 else " + ".join(names)
    frees = [g.memory_free_bytes for g in gpus]
    free = None if any(f is None for f in frees) else min(int(f or 0) for f in frees)
    caps = [g.compute_capability for g in gpus if g.compute_capability]
    from kvpilot.core.hardware.probe import memory_holders

    holders = tuple(sorted((h for g in gpus for h in memory_holders(g)),
                           key=lambda h: -h[1]))
    allreduce = None
    if len(gpus) > 1:
        from kvpilot.core.hardware.selection import gpu_set_from_probe

        allreduce = gpu_set_from_probe(result, [g.index for g in gpus]).allreduce_path(len(gpus))
    return Device(name, int(smallest.memory_total_bytes or 0), free,
                  min(caps) if caps else None, True, holders, gpus[0].index,
                  indices=tuple(g.index for g in gpus),
                  uuids=tuple(g.uuid or str(g.index) for g in gpus),
                  allreduce=allreduce)


def selected_indices(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The GPUs ``--gpu-index`` / ``--gpus`` select (None: neither given).

    Raises:
        HardwareError: a malformed ``--gpus`` list or a negative index.
    """
    from kvpilot.core.errors import HardwareError
    from kvpilot.core.hardware.selection import parse_gpu_indices

    index = getattr(args, "gpu_index", None)
    if index is not None:
        if index < 0:
            raise HardwareError(f"--gpu-index must be 0 or more, got {index}")
        return (index,)
    listed = getattr(args, "gpus", None)
    return parse_gpu_indices(listed) if listed else None


def device_from_args(args: argparse.Namespace, vllm_version: str | None) -> Device:
    """The device to plan for (see the module docstring).

    ``vllm_version`` is that of the vLLM that would run (None when none is installed); a CPU
    build of it makes a machine without an NVIDIA GPU plan for the CPU backend.

    Raises:
        FitError: an unknown GPU name, a non-positive size, or no device at all (the message
            says which flag to give).
    """
    from kvpilot.core.hardware import specs

    name, cc, total = "", None, None
    if getattr(args, "gpu", None):
        if str(args.gpu).strip().lower() == CPU_DEVICE_NAME:
            return cpu_device()
        spec = specs.lookup(None, args.gpu)
        if spec is None:
            known = ", ".join(sorted({s.short_name for s in specs.all_specs()}))
            raise FitError(f"unknown GPU '{args.gpu}'; known: {known}")
        name, cc, total = spec.name, spec.compute_capability, spec.memory_total_bytes
    if getattr(args, "gpu_total_mib", None) is not None:
        if args.gpu_total_mib <= 0:
            raise FitError("--gpu-total-mib must be positive")
        total = args.gpu_total_mib * MiB
    free_mib = getattr(args, "gpu_free_mib", None)
    if free_mib is not None and free_mib < 0:
        raise FitError("--gpu-free-mib must not be negative")
    free = free_mib * MiB if free_mib is not None else None
    indices = selected_indices(args)
    if total is not None and indices is None:
        return Device(name or "gpu", total, free, cc, False)
    gpu = detected_gpu(indices)
    if gpu is not None:
        return gpu
    if vllm_version is not None and Release.parse(vllm_version).is_cpu_build:
        return cpu_device()
    raise FitError(
        "no NVIDIA GPU found on this machine and the installed vLLM is not its CPU build; "
        "give --gpu NAME (e.g. --gpu 'RTX 4090') or --gpu-total-mib N to plan for a GPU"
    )


def settings_for_device(settings: ServingSettings, device: Device) -> ServingSettings:
    """``settings`` on ``device``: several selected GPUs mean tensor parallelism over all of
    them unless ``--tensor-parallel-size`` says otherwise."""
    from dataclasses import replace

    if device.count > 1 and settings.tensor_parallel_size == 1:
        return replace(settings, tensor_parallel_size=device.count)
    return settings

