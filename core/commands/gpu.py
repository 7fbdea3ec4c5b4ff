"""``kvpilot gpu [--json]``: the GPUs, their processes, the host, and what a launch could get now.

Exit status: 0 when NVML answered, 2 when it could not be used (one line says why and what to
do; with ``--json`` the JSON document carries the same ``error`` object).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
from typing import Any

from kvpilot.core.app.detect import LaunchNow, launch_now
from kvpilot.core.base.errors import HardwareError, KvpilotError
from kvpilot.core.base.throttle import is_throttled, reason_words, throttle_text
from kvpilot.core.base.units import MiB, gib_text
from kvpilot.core.commands import Subparsers
from kvpilot.core.fit.budget_now import DEFAULT_MARGIN_BYTES, LaunchBudget
from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult, probe
from kvpilot.core.hardware.specs import GpuSpec, lookup
from kvpilot.core.hardware.system import SystemSnapshot


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``gpu`` on the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "gpu",
        help="show GPUs, their processes, the system and the launch budget now",
        description=(
            "Show every NVIDIA GPU with the processes holding its memory, the host (CPU, RAM, "
            "disk, WSL2) and the largest gpu_memory_utilization a vLLM launch would pass "
            "its start-up check with right now."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--model-dir", metavar="DIR", help="also report free disk space where models are stored"
    )
    parser.add_argument(
        "--margin-mib",
        type=int,
        default=DEFAULT_MARGIN_BYTES // MiB,
        metavar="MIB",
        help=(
            "memory kept free for vLLM's own CUDA context plus a safety allowance "
            "(default %(default)s MiB)"
        ),
    )
    parser.add_argument(
        "--vllm-version", metavar="X.Y.Z",
        help="the vLLM release to budget for (default: the installed one); from 0.34 the "
             "launch line shows the utilization cap kvpilot launches with instead of the "
             "start-up check, which 0.34 no longer makes",
    )
    # replay a recorded snapshot instead of the driver (demos, screenshots, tests)
    parser.add_argument("--fake-nvml", metavar="SNAPSHOT", help=argparse.SUPPRESS)
    return parser


def run(args: argparse.Namespace) -> int:
    """Probe and print.

    Raises:
        HardwareError: NVML cannot be used (text output) or the snapshot cannot be read.
    """
    if args.margin_mib < 0:
        raise HardwareError(f"--margin-mib must not be negative, got {args.margin_mib}")
    result = probe(nvml_mod.option_replay(args.fake_nvml), model_dir=args.model_dir)
    margin = args.margin_mib * MiB
    version = getattr(args, "vllm_version", None)
    if version is None:
        from kvpilot.core.commands.plan import detected_vllm_version

        try:
            version = detected_vllm_version()
        except KvpilotError:  # a broken install: the report still shows the GPUs
            version = None
    launches = {g.index: launch_now(g, version, margin) for g in result.gpus}
    if args.json:
        print(json.dumps(to_json(result, launches), indent=2))
        return 0 if result.ok else 2
    if not result.ok and result.error is not None:
        raise result.error.to_error()
    print(render_text(result, launches))
    return 0


# ---------------------------------------------------------------------------- JSON
def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, (frozenset, set)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _spec_json(spec: GpuSpec | None) -> dict[str, Any] | None:
    if spec is None:
        return None
    data: dict[str, Any] = _plain(spec)
    data["fp8_kv_supported"] = spec.fp8_kv_supported
    return data


def to_json(result: ProbeResult, launches: dict[int, LaunchNow]) -> dict[str, Any]:
    """The probe as plain JSON data (bytes as integers, None as null), with each GPU's
    ``launch_budget`` (the start-up check before 0.34) and ``launch_cap`` (0.34+);
    ``launches`` holds every GPU of ``result`` by index."""
    gpus = []
    for gpu in result.gpus:
        entry = _plain(gpu)
        entry["cuda_total_bytes"] = gpu.cuda_total_bytes
        entry["process_memory_reported"] = gpu.process_memory_reported
        entry["throttle_reasons"] = (
            None if gpu.throttle_reasons_mask is None
            else list(reason_words(gpu.throttle_reasons_mask))
        )
        entry["throttled"] = (
            None if gpu.throttle_reasons_mask is None else is_throttled(gpu.throttle_reasons_mask)
        )
        launch = launches[gpu.index]
        entry["launch_budget"] = _plain(launch.budget)
        entry["launch_cap"] = _plain(launch.cap)
        entry["spec"] = _spec_json(
            lookup(gpu.pci_device_id, gpu.name, memory_total_bytes=gpu.memory_total_bytes)
        )
        gpus.append(entry)
    return {
        "source": result.source,
        "ok": result.ok,
        "error": _plain(result.error),
        "driver_version": result.driver_version,
        "cuda_driver_version": result.cuda_driver_version,
        "nvml_version": result.nvml_version,
        "gpus": gpus,
        "links": [{**_plain(link), "p2p": link.p2p} for link in result.links],
        "warnings": list(result.warnings),
        "system": _plain(result.system),
    }


# ---------------------------------------------------------------------------- text
def _gib(n: int | None) -> str:
    return "n/a" if n is None else gib_text(n)


def _na(value: object, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def _flag(value: bool | None) -> str:
    return "n/a" if value is None else ("on" if value else "off")


def _throttle_line(mask: int | None) -> str:
    """``throttled: power cap (reasons 0x4: power cap)``; ``not throttled (idle)``; ``n/a``."""
    if mask is None:
        return "n/a"
    words = reason_words(mask)
    return f"{throttle_text(mask)} (reasons 0x{mask:x}: {', '.join(words) or 'none'})"


def _gpu_lines(gpu: GpuSnapshot, budget: LaunchBudget | None) -> list[str]:
    if gpu.lost:
        return [f"GPU {gpu.index}  {gpu.name or '?'}: stopped answering (fallen off the bus?)"]
    cc = "n/a" if gpu.compute_capability is None else "{}.{}".format(*gpu.compute_capability)
    lines = [
        f"GPU {gpu.index}  {gpu.name or '?'}  (compute capability {cc}, PCI id "
        f"{_na(gpu.pci_device_id)} at {_na(gpu.pci_bus_id)})",
        f"  memory      {_gib(gpu.memory_total_bytes)} total, {_gib(gpu.memory_reserved_bytes)} "
        f"reserved by the driver, {_gib(gpu.memory_used_bytes)} used, "
        f"{_gib(gpu.memory_free_bytes)} free",
        f"  load        GPU {_na(gpu.gpu_util_percent, ' %')}, memory "
        f"{_na(gpu.mem_util_percent, ' %')}, {_na(gpu.temperature_c, ' °C')}, power "
        f"{_na(gpu.power_w, ' W')} of {_na(gpu.power_limit_w, ' W')}",
        f"  clocks      SM {_na(gpu.sm_clock_mhz, ' MHz')}, memory {_na(gpu.mem_clock_mhz, ' MHz')}"
        f"; PCIe gen {_na(gpu.pcie_gen)} x{_na(gpu.pcie_width)}",
        f"  throttle    {_throttle_line(gpu.throttle_reasons_mask)}",
        f"  modes       display {_flag(gpu.display_attached)} (active {_flag(gpu.display_active)}),"
        f" ECC {_flag(gpu.ecc_enabled)}, MIG {_flag(gpu.mig_enabled)}, persistence "
        f"{_flag(gpu.persistence_enabled)}",
    ]
    spec = lookup(gpu.pci_device_id, gpu.name, memory_total_bytes=gpu.memory_total_bytes)
    if spec is not None:
        lines.append(spec_line(spec))
    if gpu.processes:
        lines.append("  processes   PID      KIND              MEMORY        NAME / COMMAND")
        for p in gpu.processes:
            used = "not reported" if p.used_bytes is None else _gib(p.used_bytes)
            what = " ".join(p.cmdline) if p.cmdline else (p.name or "?")
            if not p.host_visible:
                what = f"{p.name or '?'} (not visible from this system)"
            lines.append(f"              {p.pid:<8} {p.kind:<17} {used:<13} {what[:60]}")
    else:
        lines.append("  processes   none")
    if gpu.unavailable_fields:
        lines.append(f"  not reported by this GPU/driver: {', '.join(gpu.unavailable_fields)}")
    if budget is not None:
        lines.append(
            f"  launch now  {budget.message} (keeps {budget.margin_bytes // MiB} MiB for vLLM's "
            f"CUDA context and safety; vLLM needs free >= ceil(total x utilization), total "
            f"{_gib(budget.total_bytes)})"
        )
    return lines


def _system_lines(s: SystemSnapshot) -> list[str]:
    os_text = s.os_pretty_name or s.os_name
    cores = f"{_na(s.cpu_cores_physical)} cores / {_na(s.cpu_cores_logical)} threads"
    return [
        f"System  {os_text} (kernel {s.os_release}){', WSL2' if s.is_wsl2 else ''}, "
        f"Python {s.python_version}",
        f"  CPU         {s.cpu_model or 'unknown'}, {cores}",
        f"  RAM         {_gib(s.ram_available_bytes)} available of {_gib(s.ram_total_bytes)}; "
        f"swap {_gib(s.swap_free_bytes)} free of {_gib(s.swap_total_bytes)}",
        f"  disk        {_gib(s.hf_cache_free_bytes)} free at the Hugging Face cache "
        f"({s.hf_cache_dir})",
        *(
            [f"              {_gib(s.model_dir_free_bytes)} free at {s.model_dir}"]
            if s.model_dir
            else []
        ),
    ]


def render_text(result: ProbeResult, launches: dict[int, LaunchNow]) -> str:
    """The human-readable report; from vLLM 0.34 the launch cap's line replaces the start-up
    budget's."""
    head = (
        f"NVIDIA driver {_na(result.driver_version)}, CUDA {_na(result.cuda_driver_version)}, "
        f"NVML {_na(result.nvml_version)}"
    )
    if result.source != "nvml":
        head += f"  [{result.source}]"
    lines = [head, ""]
    for gpu in result.gpus:
        launch = launches[gpu.index]
        # from 0.34 the cap's line stands where the start-up check's would
        lines.extend(_gpu_lines(gpu, launch.budget if launch.cap is None else None))
        if launch.cap is not None:
            lines.append(f"  launch now  {launch.text}")
        lines.append("")
    for link in result.links:
        p2p = {True: "peer-to-peer", False: "no peer-to-peer", None: "peer-to-peer unknown"}[
            link.p2p
        ]
        why = f" ({link.p2p_reason})" if link.p2p is False and link.p2p_reason else ""
        nvlink = ", NVLink" if link.nvlink else ""
        lines.append(
            f"GPU {link.index_a} <-> GPU {link.index_b}: {link.topology or 'topology unknown'}, "
            f"{p2p}{why}{nvlink}"
        )
    if result.links:
        lines.append("")
    lines.extend(f"warning: {w}" for w in result.warnings)
    lines.extend(_system_lines(result.system))
    return "\n".join(lines)


def spec_line(spec: GpuSpec) -> str:
    """The ``spec`` line: bandwidth, BF16 TFLOPS and FP8 KV support; a value the spec table
    does not hold as verified is starred, and the note says what the star means only when one
    is."""
    star_bw = "" if spec.is_verified("bandwidth_bytes_per_s") else "*"
    star_tf = "" if spec.is_verified("bf16_dense_tflops") else "*"
    bw = (
        "n/a"
        if spec.bandwidth_bytes_per_s is None
        else f"{spec.bandwidth_bytes_per_s / 1e9:g} GB/s{star_bw}"
    )
    tflops = _na(spec.bf16_dense_tflops, " TFLOPS")
    if spec.bf16_dense_tflops is not None:
        tflops += star_tf
    starred = (spec.bandwidth_bytes_per_s is not None and star_bw) or (
        spec.bf16_dense_tflops is not None and star_tf)
    mark = "  (* unverified value)" if starred else ""
    return (
        f"  spec        {spec.short_name}: {bw}, BF16 {tflops}"
        f", FP8 KV cache {'yes' if spec.fp8_kv_supported else 'no'}{mark}"
    )
