"""``kvpilot plan``: the memory budget of one configuration, term by term.

Contract (scripts depend on it)::

    kvpilot plan --model DIR|REPO_ID|CATALOG_ID --gpu-total-mib N [--gpu-free-mib N] [--gpu NAME]
                 [--gpu-memory-utilization U] [--max-model-len L] [--max-num-seqs S]
                 [--max-num-batched-tokens B] [--kv-cache-dtype auto|fp8] [--quantization Q]
                 [--tensor-parallel-size T] [--enforce-eager] [--vllm-version X.Y.Z] [--json]
                 [--measure [--vllm PATH]]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from kvpilot.core import paths
from kvpilot.core.errors import FitError
from kvpilot.core.fit.calibrate import calibrated_capacity
from kvpilot.core.fit.plan import Capacity, GiB, MiB, PlanInputs
from kvpilot.core.fit.support import check_support
from kvpilot.core.measurements import MeasurementStore
from kvpilot.core.models.resolve import load_model_spec

DEFAULT_VLLM_VERSION = "0.33.0"


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


def add_plan_arguments(parser: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    """The plan flags shared by ``plan`` and ``serve``."""
    parser.add_argument("--model", required=model_required,
                        help="model directory, Hugging Face repo id or catalog id")
    parser.add_argument("--gpu-total-mib", type=int, help="GPU memory in MiB (as nvidia-smi)")
    parser.add_argument("--gpu-free-mib", type=int, help="free GPU memory now, in MiB")
    parser.add_argument("--gpu", help="GPU name from the spec table, e.g. 'RTX 4090'")
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--kv-cache-memory-bytes", type=parse_size,
                        help="fixed KV cache size (e.g. 8G); replaces the utilization budget")
    parser.add_argument("--quantization")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--vllm-version", default=None,
                        help=f"vLLM version to plan for (default {DEFAULT_VLLM_VERSION})")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "plan", help="predict vLLM's memory budget for one configuration",
        description="Predict, term by term, how vLLM will size memory for one configuration.",
    )
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--measure", action="store_true",
                        help="launch the plan with dummy weights, read what vLLM reports, store it")
    parser.add_argument("--vllm", help="vLLM executable or interpreter for --measure")
    parser.add_argument("--measure-timeout", type=float, default=600.0, help="seconds")
    return parser


def gpu_from_args(args: argparse.Namespace) -> tuple[int, int | None, str, tuple[int, int] | None]:
    """(total bytes, free bytes, name, compute capability) from --gpu / --gpu-total-mib.

    Raises:
        FitError: neither given, or an unknown GPU name.
    """
    from kvpilot.core.hardware import specs

    name, cc, total = "", None, None
    if args.gpu:
        spec = specs.lookup(None, args.gpu)
        if spec is None:
            known = ", ".join(sorted({s.short_name for s in specs.all_specs()}))
            raise FitError(f"unknown GPU '{args.gpu}'; known: {known}")
        name, cc, total = spec.name, spec.compute_capability, spec.memory_total_bytes
    if args.gpu_total_mib is not None:
        if args.gpu_total_mib <= 0:
            raise FitError("--gpu-total-mib must be positive")
        total = args.gpu_total_mib * MiB
    if total is None:
        raise FitError("give --gpu-total-mib N or --gpu NAME (e.g. --gpu 'RTX 4090')")
    free = args.gpu_free_mib * MiB if args.gpu_free_mib is not None else None
    return total, free, name, cc


def detected_vllm_version(configured: str | None = None) -> str | None:
    """The version of the vLLM kvpilot would launch, or None when none is installed."""
    from kvpilot.core.errors import RuntimeNotFoundError
    from kvpilot.core.vllm import runtime as vllm_runtime

    try:
        return vllm_runtime.discover(configured).version
    except RuntimeNotFoundError:
        return None


def inputs_from_args(args: argparse.Namespace, *, vllm_version: str | None = None) -> PlanInputs:
    """Build PlanInputs from the shared plan flags (loads the model spec).

    The vLLM version is, in order: ``vllm_version``, ``--vllm-version``, the installed vLLM's,
    then the newest kvpilot knows.

    Raises:
        KvpilotError: bad model reference or GPU.
    """
    total, free, name, cc = gpu_from_args(args)
    model = load_model_spec(args.model)
    return PlanInputs(
        model=model,
        gpu_total_bytes=total,
        gpu_free_bytes=free,
        gpu_name=name,
        compute_capability=cc,
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        kv_cache_dtype=args.kv_cache_dtype,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        quantization=args.quantization,
        tensor_parallel_size=args.tensor_parallel_size,
        enforce_eager=args.enforce_eager,
        vllm_version=vllm_version
        or args.vllm_version
        or detected_vllm_version(getattr(args, "vllm", None))
        or DEFAULT_VLLM_VERSION,
    )


def plan(inputs: PlanInputs, store: MeasurementStore | None = None) -> Capacity:
    """Capacity of ``inputs``, using stored measurements for this GPU/model/version."""
    records = []
    if store is not None:
        records = store.for_model(
            inputs.gpu_name, inputs.model.model_id, inputs.vllm_version,
            gpu_total_bytes=inputs.gpu_total_bytes,
        )
    capacity = calibrated_capacity(inputs, records)
    unsupported = check_support(inputs)
    if unsupported is not None and capacity.failure is None:
        capacity = replace(capacity, fits=False, failure=unsupported)
    return capacity


def run(args: argparse.Namespace) -> int:
    store = MeasurementStore(paths.measurements_path())
    if args.measure:
        from kvpilot.core.vllm import runtime as vllm_runtime

        rt = vllm_runtime.discover(args.vllm)
        inputs = inputs_from_args(args, vllm_version=rt.version)
        _measure(args, inputs, store, rt)
    else:
        inputs = inputs_from_args(args)
    capacity = plan(inputs, store)
    if args.json:
        print(json.dumps(capacity.to_json(), indent=2, default=str))
    else:
        print(render(inputs, capacity))
    return 0 if capacity.fits else 1


def _measure(
    args: argparse.Namespace, inputs: PlanInputs, store: MeasurementStore, rt: Any
) -> None:
    """Launch with dummy weights and store what vLLM reported (needs a vLLM runtime)."""
    from kvpilot.core.fit.calibrate import key_for
    from kvpilot.core.vllm.command import LaunchSpec, find_free_port
    from kvpilot.core.vllm.measure import run_measurement

    print(f"measuring with vLLM {rt.version} ({rt.location}), dummy weights...", flush=True)
    model_ref = inputs.model.source or inputs.model.model_id
    spec = LaunchSpec.from_plan(
        inputs, model_ref, load_format="dummy", port=find_free_port("127.0.0.1", 8000)
    )
    key = key_for(inputs)
    measured = run_measurement(
        rt, spec, store, args.measure_timeout, data_dir=paths.data_dir(),
        key=key,
    )
    if measured.available_kv_bytes is not None:
        print(f"measured: {measured.available_kv_bytes / GiB:.2f} GiB KV, "
              f"{measured.kv_cache_tokens or 0:,} tokens ({measured.measured_at})")


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:8.2f} GiB"


def render(inputs: PlanInputs, cap: Capacity) -> str:
    """A readable table of the budget (the non-JSON output)."""
    lines = [
        f"model     {inputs.model.model_id}  ({inputs.model.architecture})",
        f"GPU       {inputs.gpu_name or 'unnamed'}  {inputs.gpu_total_bytes / GiB:.2f} GiB"
        + (f", {inputs.gpu_free_bytes / GiB:.2f} GiB free" if inputs.gpu_free_bytes else ""),
        f"vLLM      {cap.inputs.get('vllm_version')} "
        f"(memory rules of {cap.inputs.get('vllm_rules_since')}+)",
        f"settings  max_model_len {cap.max_model_len:,} · max_num_seqs {cap.max_num_seqs} · "
        f"batched tokens {cap.max_num_batched_tokens:,} · KV {cap.kv_cache_dtype} · "
        f"utilization {cap.gpu_memory_utilization:g}",
        "",
        f"{'term':16} {'size':>12}  {'source':9} note",
    ]
    for t in cap.terms:
        lines.append(f"{t.name:16} {_gib(t.bytes):>12}  {t.source:9} {t.note}")
    lines += [
        "",
        f"KV bytes/token  {cap.kv_bytes_per_token:,}   block {cap.block_size} tokens, "
        f"{cap.num_blocks:,} blocks",
        f"KV cache        {cap.kv_cache_tokens:,} tokens · maximum concurrency "
        f"{cap.max_concurrency:.2f}x at {cap.max_model_len:,} tokens",
    ]
    if cap.headroom_bytes is not None:
        lines.append(f"headroom        {cap.headroom_bytes / GiB:.2f} GiB of free memory unused")
    if cap.failure is None:
        lines.append("verdict         fits")
    else:
        lines.append(f"verdict         does not fit ({cap.failure.kind}): {cap.failure.message}")
    return "\n".join(lines)
