"""The serving flags and the device that ``plan``, ``recommend`` and ``serve`` share.

Every command that plans or launches takes the same ``vllm serve`` settings
(:func:`add_serving_arguments` -> :func:`settings_from_args`, one
:class:`~kvpilot.core.base.plan.ServingSettings`) and plans for the same device by default
(:func:`device_from_args`): the GPU named on the command line; else the NVIDIA GPU NVML reports;
else, when the vLLM that would run is its CPU build, vLLM's CPU backend with the RAM as its memory.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import CPU_DEVICE_NAME, ServingSettings
from kvpilot.core.base.speculative_config import parse_speculative_config
from kvpilot.core.base.units import MiB
from kvpilot.core.base.versions import Release
from kvpilot.core.hardware import target
from kvpilot.core.hardware.target import DeviceTarget


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


def context_arg(text: str) -> int:
    """A context length on the command line (``--max-model-len``, ``--context``): ``8192``,
    ``32768``, ``32k`` or ``32K`` (:func:`kvpilot.core.base.goal.parse_context_tokens`, the one
    parser the window uses too), for argparse."""
    from kvpilot.core.base.goal import parse_context_tokens

    try:
        return parse_context_tokens(text)
    except FitError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def add_serving_arguments(
    parser: argparse.ArgumentParser, *, with_length_and_seqs: bool = True
) -> None:
    """The ``vllm serve`` settings that decide memory, spelled as vLLM spells them."""
    if with_length_and_seqs:
        parser.add_argument("--max-model-len", type=context_arg, metavar="TOKENS",
                            help="context length in tokens, e.g. 32768 or 32k")
        parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--kv-cache-memory-bytes", type=parse_size,
                        help="fixed KV cache size (e.g. 8G); replaces the utilization budget")
    parser.add_argument("--quantization")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1,
                        help="pipeline stages (each GPU holds its stage's layers)")
    parser.add_argument("--cpu-offload-gb", type=float, metavar="GIB",
                        help="GiB of weights per GPU kept in pinned host memory")
    parser.add_argument("--language-model-only", action="store_true",
                        help="load no vision or audio tower (text only)")
    parser.add_argument("--mamba-cache-mode", choices=("all", "align", "none"),
                        help="hybrid models' state caching with prefix caching "
                        "(default: vLLM's for the model)")
    parser.add_argument("--mamba-ssm-cache-dtype",
                        choices=("auto", "float32", "float16", "bfloat16"),
                        help="dtype of hybrid models' SSM state (default: the checkpoint's)")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                        default=None, help="(default: vLLM's, on for generative models)")
    parser.add_argument("--dtype", help="activation dtype (default: the checkpoint's)")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--limit-mm-per-prompt", type=parse_mm_limit, metavar="IMAGES",
                        help="images per prompt for a vision model (0 = text only: no "
                        "encoder profile; default: vLLM's)")
    add_adapter_arguments(parser)


def add_adapter_arguments(parser: argparse.ArgumentParser) -> None:
    """LoRA slots, speculative decoding and the runner, spelled as ``vllm serve`` spells them."""
    group = parser.add_argument_group("adapters, draft models and pooling (vLLM's flags)")
    group.add_argument("--enable-lora", action="store_true",
                       help="reserve GPU slots for LoRA adapters")
    group.add_argument("--max-loras", type=int, metavar="N",
                       help="adapters in one batch (default: vLLM's 1)")
    group.add_argument("--max-lora-rank", type=int, metavar="R",
                       help="largest adapter rank (default: vLLM's 16)")
    group.add_argument("--max-cpu-loras", type=int, metavar="N",
                       help="adapters cached in host memory (default: --max-loras)")
    group.add_argument("--lora-dtype", choices=("auto", "float16", "bfloat16"))
    group.add_argument("--fully-sharded-loras", action="store_true",
                       help="shard the LoRA stacks over the tensor-parallel GPUs")
    group.add_argument("--speculative-config", metavar="JSON",
                       help='e.g. \'{"method": "mtp", "num_speculative_tokens": 1}\' or '
                       '\'{"method": "ngram", "num_speculative_tokens": 3, '
                       '"prompt_lookup_max": 4}\'')
    group.add_argument("--runner", choices=("auto", "generate", "pooling", "draft"),
                       help="pooling for embedding and reranking models")


def settings_from_args(args: argparse.Namespace) -> ServingSettings:
    """The :class:`ServingSettings` the flags of :func:`add_serving_arguments` give.

    Raises:
        FitError: a size or count that is not positive.
    """
    for flag in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
                 "tensor_parallel_size", "pipeline_parallel_size"):
        value = getattr(args, flag, None)
        if value is not None and value < 1:
            raise FitError(f"--{flag.replace('_', '-')} must be at least 1, got {value}")
    offload = getattr(args, "cpu_offload_gb", None)
    if offload is not None and offload < 0:
        raise FitError(f"--cpu-offload-gb must be 0 or more GiB, got {offload:g}")
    ssm = getattr(args, "mamba_ssm_cache_dtype", None)
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
        pipeline_parallel_size=getattr(args, "pipeline_parallel_size", None) or 1,
        language_model_only=bool(getattr(args, "language_model_only", False)),
        cpu_offload_gb=offload or None,
        mamba_cache_mode=getattr(args, "mamba_cache_mode", None),
        mamba_ssm_cache_dtype=None if ssm in (None, "auto") else ssm,
        **adapter_settings_from_args(args),
    )


def adapter_settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The LoRA / speculative / runner fields of :class:`ServingSettings` from the flags.

    Raises:
        FitError: a slot count or rank below 1, LoRA flags without ``--enable-lora``, or a
            ``--speculative-config`` vLLM would refuse (not a JSON object, no method or model,
            a draft method without its model ...).
    """
    enable = bool(getattr(args, "enable_lora", False))
    values: dict[str, Any] = {"enable_lora": enable}
    for name in ("max_loras", "max_lora_rank", "max_cpu_loras"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise FitError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
        values[name] = value
    values["lora_dtype"] = getattr(args, "lora_dtype", None)
    values["fully_sharded_loras"] = bool(getattr(args, "fully_sharded_loras", False))
    given = [f"--{n.replace('_', '-')}" for n in ("max_loras", "max_lora_rank",
                                                  "max_cpu_loras", "lora_dtype",
                                                  "fully_sharded_loras")
             if values[n] not in (None, False)]
    if given and not enable:
        raise FitError(f"{', '.join(given)} need --enable-lora (vLLM reserves no LoRA slots "
                       "without it)")
    spec = getattr(args, "speculative_config", None)
    if spec is not None:
        parse_speculative_config(spec)
    values["speculative_config"] = spec
    runner = getattr(args, "runner", None)
    values["runner"] = None if runner in (None, "auto") else runner
    return values


def cpu_device() -> DeviceTarget:
    """vLLM's CPU backend on this machine: the RAM is its memory."""
    return target.cpu_target()


def detected_gpu(indices: tuple[int, ...] | None = None,
                 nvml_module: object | None = None) -> DeviceTarget | None:
    """This machine's GPU(s) with their free memory now, or None when NVML reports none.

    ``indices`` selects GPUs by NVML index (default: GPU 0). Several GPUs make one target
    whose memory is that of the smallest (it bounds what each tensor-parallel rank holds).
    ``nvml_module`` replaces the NVML library (a recorded snapshot's replay).

    Raises:
        HardwareError: ``indices`` names a GPU NVML does not report.
        ProcUnreadableError: ``/proc`` cannot be read (a container or chroot).
    """
    from kvpilot.core.base.errors import HardwareError, ProcUnreadableError
    from kvpilot.core.hardware.probe import probe
    from kvpilot.core.hardware.selection import select_gpus

    try:
        result = probe(nvml_module)
    except ProcUnreadableError:
        raise
    except HardwareError:
        if indices:
            raise
        return None
    if not result.ok or not result.gpus:
        if indices:
            select_gpus(result, indices)  # raises with the reason
        return None
    try:
        return target.from_probe(result, indices)
    except FitError:
        return None


def selected_indices(args: argparse.Namespace) -> tuple[int, ...] | None:
    """The GPUs ``--gpu-index`` / ``--gpus`` select (None: neither given).

    Raises:
        HardwareError: a malformed ``--gpus`` list or a negative index.
    """
    from kvpilot.core.base.errors import HardwareError
    from kvpilot.core.hardware.selection import parse_gpu_indices

    index = getattr(args, "gpu_index", None)
    if index is not None:
        if index < 0:
            raise HardwareError(f"--gpu-index must be 0 or more, got {index}")
        return (index,)
    listed = getattr(args, "gpus", None)
    return parse_gpu_indices(listed) if listed else None


def device_from_args(args: argparse.Namespace, vllm_version: str | None) -> DeviceTarget:
    """The device to plan for (see the module docstring).

    ``vllm_version`` is that of the vLLM that would run (None when none is installed); a CPU
    build of it makes a machine without an NVIDIA GPU plan for the CPU backend.

    Raises:
        FitError: an unknown GPU name, a non-positive size, or no device at all (the message
            says which flag to give).
    """
    gpu = getattr(args, "gpu", None)
    if gpu and str(gpu).strip().lower() == CPU_DEVICE_NAME:
        return cpu_device()
    total_mib = getattr(args, "gpu_total_mib", None)
    free_mib = getattr(args, "gpu_free_mib", None)
    if free_mib is not None and free_mib < 0:
        raise FitError("--gpu-free-mib must not be negative")
    free = free_mib * MiB if free_mib is not None else None
    named = target.from_spec(str(gpu)) if gpu else None
    if named is not None and total_mib is None and selected_indices(args) is None:
        return replace(named, free_bytes=free) if free is not None else named
    if total_mib is not None and selected_indices(args) is None:
        if total_mib <= 0:
            raise FitError("--gpu-total-mib must be positive")
        return target.from_size(
            total_mib * MiB, free, name=named.name if named else "gpu",
            compute_capability=named.compute_capability if named else None,
        )
    indices = selected_indices(args)
    found = detected_gpu(indices)
    if found is not None:
        return found
    if vllm_version is not None and Release.parse(vllm_version).is_cpu_build:
        return cpu_device()
    raise FitError(
        "no NVIDIA GPU found on this machine and the installed vLLM is not its CPU build; "
        "give --gpu NAME (e.g. --gpu 'RTX 4090') or --gpu-total-mib N to plan for a GPU"
    )


def settings_for_device(settings: ServingSettings, device: DeviceTarget) -> ServingSettings:
    """``settings`` on ``device``: several selected GPUs mean tensor parallelism over all of
    them unless ``--tensor-parallel-size`` says otherwise."""
    if device.count > 1 and settings.tensor_parallel_size == 1:
        return replace(settings, tensor_parallel_size=device.count)
    return settings


def device_and_settings(
    args: argparse.Namespace, vllm_version: str | None, settings: ServingSettings | None = None
) -> tuple[DeviceTarget, ServingSettings]:
    """The device the flags name (:func:`device_from_args`) and ``settings`` (default: the
    serving flags', :func:`settings_from_args`) on it (:func:`settings_for_device`).

    Raises:
        FitError: an unknown GPU name, no device at all, or a size or count that is not
            positive.
    """
    device = device_from_args(args, vllm_version)
    if settings is None:
        settings = settings_from_args(args)
    return device, settings_for_device(settings, device)
