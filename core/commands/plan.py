"""``kvpilot plan``: the memory budget of one configuration, term by term.

Contract (scripts depend on it)::

    kvpilot plan --model DIR|REPO_ID|CATALOG_ID [--gpu NAME] [--gpu-total-mib N]
                 [--gpu-free-mib N] [--gpu-memory-utilization U] [--max-model-len L]
                 [--max-num-seqs S] [--max-num-batched-tokens B] [--kv-cache-dtype auto|fp8]
                 [--kv-cache-memory-bytes SIZE] [--quantization Q] [--tensor-parallel-size T]
                 [--enforce-eager] [--[no-]enable-prefix-caching] [--dtype D] [--block-size N]
                 [--vllm-version X.Y.Z] [--json] [--measure [--vllm PATH]]

Without ``--gpu`` / ``--gpu-total-mib`` it plans for this machine: the NVIDIA GPU NVML reports
(with its free memory now), else vLLM's CPU backend when the installed vLLM is its CPU build.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from kvpilot.core.app.launch_settings import UtilizationChoice, with_chosen_utilization
from kvpilot.core.app.measure import newest_startup_s
from kvpilot.core.base import paths, versions
from kvpilot.core.base.model_spec import UNKNOWN_ARCHITECTURE_NOTE
from kvpilot.core.base.plan import (
    VERDICT_BORDERLINE,
    Capacity,
    PlanInputs,
    Verdict,
)
from kvpilot.core.base.units import GiB, gib_text
from kvpilot.core.base.versions import NEWEST_KNOWN
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.serving_args import (
    add_device_arguments,
    add_serving_arguments,
    device_and_settings,
)
from kvpilot.core.fit.borderline import borderline_note
from kvpilot.core.fit.calibrate import planned_capacity
from kvpilot.core.fit.measurements import MeasurementStore
from kvpilot.core.hub.resolve import load_model_spec

if TYPE_CHECKING:
    from kvpilot.core.runtimes.discovery import VllmRuntime

#: the release planned for when none is given and none is installed
DEFAULT_VLLM_VERSION = NEWEST_KNOWN


def add_plan_arguments(parser: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    """The plan flags shared by ``plan`` and ``serve``: model, device, serving settings."""
    parser.add_argument("--model", required=model_required,
                        help="model directory, Hugging Face repo id or catalog id")
    add_device_arguments(parser)
    add_serving_arguments(parser)
    parser.add_argument("--vllm-version", default=None,
                        help="vLLM version to plan for (default: the installed vLLM's, "
                        f"else {DEFAULT_VLLM_VERSION})")


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
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


def detected_vllm_version(configured: str | None = None) -> str | None:
    """The version of the vLLM kvpilot would launch, or None when none is installed."""
    from kvpilot.core.base.errors import RuntimeNotFoundError
    from kvpilot.core.runtimes import discovery as vllm_runtime

    try:
        return vllm_runtime.discover(configured).version
    except RuntimeNotFoundError:
        return None


def inputs_from_args(args: argparse.Namespace, *, vllm_version: str | None = None) -> PlanInputs:
    """Build PlanInputs from the shared plan flags (loads the model spec); see
    :func:`plan_inputs_and_choice`.

    Raises:
        KvpilotError: bad model reference, GPU or flag.
    """
    return plan_inputs_and_choice(args, vllm_version=vllm_version)[0]


def plan_inputs_and_choice(
    args: argparse.Namespace, *, vllm_version: str | None = None
) -> tuple[PlanInputs, UtilizationChoice]:
    """PlanInputs from the shared plan flags and the utilization they are planned with.

    The vLLM version is, in order: ``vllm_version``, ``--vllm-version``, the installed vLLM's,
    then the newest kvpilot knows. The device is the one the flags name, else this machine's
    (:func:`~kvpilot.core.commands.serving_args.device_and_settings`). Without
    ``--gpu-memory-utilization`` the utilization is chosen as the window chooses it
    (:func:`kvpilot.core.app.launch_settings.choose_utilization`).

    Raises:
        KvpilotError: bad model reference, GPU or flag.
    """
    version = (
        vllm_version
        or args.vllm_version
        or detected_vllm_version(getattr(args, "vllm", None))
        or DEFAULT_VLLM_VERSION
    )
    device, settings = device_and_settings(args, version)
    settings, choice = with_chosen_utilization(settings, device, version)
    model = load_model_spec(args.model)
    return device.plan_inputs(model, version, settings), choice


def plan(inputs: PlanInputs, store: MeasurementStore | None = None) -> Capacity:
    """Capacity of ``inputs``, using stored measurements for this device/model/release."""
    return planned_capacity(inputs, store)


def run(args: argparse.Namespace) -> int:
    store = MeasurementStore(paths.measurements_path())
    if args.measure:
        from kvpilot.core.runtimes import discovery as vllm_runtime

        rt = vllm_runtime.discover(args.vllm)
        inputs, choice = plan_inputs_and_choice(args, vllm_version=rt.version)
        _measure(args, inputs, store, rt)
    else:
        inputs, choice = plan_inputs_and_choice(args)
    capacity = plan(inputs, store)
    if args.json:
        print(json.dumps({**capacity.to_json(), "utilization_choice": choice.to_json()},
                         indent=2, default=str))
    else:
        startup = newest_startup_s(inputs, store) if capacity.verdict == VERDICT_BORDERLINE \
            else None
        print(render(inputs, capacity, startup_s=startup, utilization_note=choice.sentence))
    return 0 if capacity.fits else 1


def _measure(
    args: argparse.Namespace, inputs: PlanInputs, store: MeasurementStore, rt: VllmRuntime
) -> None:
    """The application layer's dry run (:func:`kvpilot.core.app.measure.measure_plan`, as the
    window's "Measure on this GPU"), with its progress printed."""
    from kvpilot.core.app.measure import MeasureRequest, expected_dry_run_s, measure_plan

    low, high, basis = expected_dry_run_s(inputs, store)
    print(f"measuring with vLLM {rt.version} ({rt.location}), dummy weights; expect "
          f"{low:.0f}-{high:.0f} s ({basis})...", flush=True)
    measured = measure_plan(MeasureRequest(rt, inputs, store.path.parent,
                                           timeout_s=args.measure_timeout))
    if measured.available_kv_bytes is not None:
        print(f"measured: {measured.available_kv_bytes / GiB:.2f} GiB KV, "
              f"{measured.kv_cache_tokens or 0:,} tokens ({measured.measured_at})")


def _gib(n: int | None) -> str:
    return "-" if n is None else gib_text(n, width=8)


def render(
    inputs: PlanInputs, cap: Capacity, startup_s: float | None = None, utilization_note: str = ""
) -> str:
    """A readable table of the budget (the non-JSON output).

    ``startup_s`` is a measured start-up time, quoted when a borderline plan offers the dry run;
    ``utilization_note`` says how an automatic utilization was chosen (one line under the
    settings).
    """
    arch = inputs.model.architecture
    if not inputs.model.architecture_known:
        arch += f"; {UNKNOWN_ARCHITECTURE_NOTE}"
    lines = [
        f"model     {inputs.model.model_id}  ({arch})",
        f"GPU       {inputs.gpu_name or 'unnamed'}  {inputs.gpu_total_bytes / GiB:.2f} GiB"
        + (f", {inputs.gpu_free_bytes / GiB:.2f} GiB free" if inputs.gpu_free_bytes else ""),
        f"vLLM      {cap.inputs.get('vllm_version')} "
        f"(memory rules of {cap.inputs.get('vllm_rules_since')}+"
        + (", KV cache sized from the memory free at launch: 0.34's extensible KV cache)"
           if cap.inputs.get("extensible_kv_cache") else ")"),
        *(
            [f"note      {note}"]
            if (note := versions.support_note(str(cap.inputs.get("vllm_version"))))
            else []
        ),
        f"settings  max_model_len {cap.max_model_len:,} · max_num_seqs {cap.max_num_seqs} · "
        f"batched tokens {cap.max_num_batched_tokens:,} · KV {cap.kv_cache_dtype} · "
        f"utilization {cap.gpu_memory_utilization:g}",
        *([f"note      {utilization_note}"] if utilization_note else []),
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
    low, high = cap.available_kv_band_bytes
    lines.append(f"KV band         {low / GiB:.2f} to {high / GiB:.2f} GiB (validation error of "
                 f"the vLLM {cap.inputs.get('vllm_rules_since')}+ rules, weights from "
                 f"{cap.inputs.get('weights_source')}"
                 + (f"; {room / GiB:.2f} GiB lower for Windows' memory under WSL2"
                    if (room := cap.inputs.get("wsl2_residency_bytes")) else "") + ")")
    verdict = f"verdict         {cap.verdict.words}"
    if cap.verdict is not Verdict.FITS and cap.failure is not None:
        verdict += f" ({cap.failure.kind}): {cap.failure.message}"
    lines.append(verdict)
    if cap.verdict is Verdict.BORDERLINE:
        lines.append(f"                {borderline_note(cap, startup_s)}")
    return "\n".join(lines)
