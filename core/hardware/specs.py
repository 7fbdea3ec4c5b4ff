"""GPU facts the planner needs and NVML does not give: bandwidth, BF16 TFLOPS, FP8 support.

Read from ``resources/gpus.json`` (one entry per board, each with its sources and the list of
fields whose values are not verified). :func:`lookup` finds a board by PCI device id first (exact,
from NVML), then by name: ``"NVIDIA GeForce RTX 4090"``, ``"RTX 4090"`` and ``"rtx4090"`` are the
same key.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kvpilot.core.base.units import MiB

#: FP8 KV cache needs SM 8.9+: below it, vLLM's Triton fallback rejects FP8 KV (reference §6)
FP8_KV_MIN_CAPABILITY = (8, 9)

#: the platforms whose CUDA-visible totals the spec table lists
PLATFORM_LINUX = "linux"
PLATFORM_WSL2 = "wsl2"
PLATFORMS = (PLATFORM_LINUX, PLATFORM_WSL2)

#: share of the NVML total taken as driver-reserved where no CUDA total of a board is known:
#: above every reserved share seen on Linux (RTX 3090 1.8 %, RTX 4090 1.4 %, L40S 1.3 %,
#: H100 0.6 %), so that an estimated budget is a little smaller than the real one, never larger
ESTIMATED_RESERVED_SHARE = 0.02


@dataclass(frozen=True)
class GpuSpec:
    """Facts about one GPU model. Sizes in bytes, bandwidth in bytes/s, power in watts.

    ``memory_total_bytes`` is NVML's total (``nvidia-smi`` "Total"); CUDA's total, to which
    vLLM applies ``gpu_memory_utilization``, is a few hundred MiB smaller (driver-reserved).
    ``unverified_fields`` names the fields whose values are estimates or from weak sources.
    """

    name: str
    short_name: str
    arch: str
    compute_capability: tuple[int, int]
    pci_device_ids: tuple[str, ...]
    nvml_names: tuple[str, ...]
    aliases: tuple[str, ...]
    memory_total_bytes: int
    #: CUDA's total per platform (``linux``, ``wsl2``) where a vLLM log or report gave it
    cuda_totals_bytes: tuple[tuple[str, int], ...]
    cuda_total_sources: tuple[str, ...]
    bandwidth_bytes_per_s: int | None
    bf16_dense_tflops: float | None
    bf16_tflops_basis: str | None
    fp8_w8a8_supported: bool
    power_limit_w: float | None
    unverified_fields: frozenset[str]
    notes: str | None
    sources: tuple[str, ...]

    @property
    def fp8_kv_supported(self) -> bool:
        """True when ``--kv-cache-dtype fp8`` works on every attention backend (CC >= 8.9)."""
        return self.compute_capability >= FP8_KV_MIN_CAPABILITY

    def is_verified(self, field: str) -> bool:
        """False when the value of ``field`` is an estimate or from a weak source.

        ``cuda_total_bytes.linux`` / ``cuda_total_bytes.wsl2`` name one platform's CUDA total.
        """
        return field not in self.unverified_fields

    def cuda_total(self, platform: str = PLATFORM_LINUX) -> tuple[int, str]:
        """(bytes, where the figure comes from) of the total CUDA reports on ``platform``: what
        vLLM multiplies by ``gpu_memory_utilization`` (a few hundred MiB below NVML's total on
        Linux, where the driver reserves some; NVML's total under WSL2).

        A board without a reported figure for ``platform`` gets an estimate: under WSL2 the
        NVML total, on Linux the NVML total less :data:`ESTIMATED_RESERVED_SHARE`.

        Raises:
            ValueError: ``platform`` is not one of :data:`PLATFORMS`.
        """
        if platform not in PLATFORMS:
            raise ValueError(f"unknown platform {platform!r}; known: {', '.join(PLATFORMS)}")
        known = dict(self.cuda_totals_bytes)
        if platform in known:
            verified = self.is_verified(f"cuda_total_bytes.{platform}")
            how = "reported by vLLM" if verified else "derived from a similar report"
            return known[platform], f"CUDA total on {platform}, {how} (gpus.json sources)"
        if platform == PLATFORM_WSL2:
            return self.memory_total_bytes, "CUDA total under WSL2 estimated as NVML's total"
        reserved = round(self.memory_total_bytes * ESTIMATED_RESERVED_SHARE / MiB) * MiB
        return (self.memory_total_bytes - reserved,
                f"CUDA total on linux estimated as NVML's total less "
                f"{ESTIMATED_RESERVED_SHARE:.0%} driver-reserved (no vLLM report of this board)")

    @property
    def fully_verified(self) -> bool:
        """True when no field of this entry is marked unverified."""
        return not self.unverified_fields


def normalize_name(name: str) -> str:
    """Lookup key of a GPU name: lower case, no vendor words, letters and digits only.

    ``"NVIDIA GeForce RTX 4090"`` -> ``"rtx4090"``; ``"A100-SXM4-80GB"`` -> ``"a100sxm480gb"``.
    """
    text = name.lower()
    text = re.sub(r"\b(nvidia|geforce)\b", " ", text)
    return re.sub(r"[^a-z0-9]", "", text)


def normalize_pci_device_id(value: str | int) -> str | None:
    """``"0x2684"``, ``"2684"``, ``0x2684`` or NVML's full ``"0x268410DE"`` -> ``"0x2684"``.

    None when the value is not a PCI device id.
    """
    if isinstance(value, int):
        number = value
    else:
        text = value.strip().lower()
        text = text[2:] if text.startswith("0x") else text
        if not text or not re.fullmatch(r"[0-9a-f]+", text):
            return None
        number = int(text, 16)
    if number > 0xFFFF:
        if number & 0xFFFF != 0x10DE:  # not NVIDIA's vendor id in the low half
            return None
        number >>= 16
    return f"0x{number:04x}"


def _parse_cc(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return (int(major), int(minor))


def _spec(entry: dict[str, Any]) -> GpuSpec:
    bw = entry.get("mem_bandwidth_gbps")
    power = entry.get("power_w")
    return GpuSpec(
        name=entry["name"],
        short_name=entry["short_name"],
        arch=entry["arch"],
        compute_capability=_parse_cc(entry["compute_capability"]),
        pci_device_ids=tuple(entry["pci_device_ids"]),
        nvml_names=tuple(entry.get("nvml_names", ())),
        aliases=tuple(entry.get("aliases", ())),
        memory_total_bytes=int(entry["nvml_total_mib"]) * MiB,
        cuda_totals_bytes=tuple(sorted(
            (str(k), int(v) * MiB) for k, v in (entry.get("cuda_total_mib") or {}).items()
        )),
        cuda_total_sources=tuple(entry.get("cuda_total_sources", ())),
        bandwidth_bytes_per_s=None if bw is None else round(float(bw) * 1e9),
        bf16_dense_tflops=entry.get("bf16_dense_tflops"),
        bf16_tflops_basis=entry.get("bf16_tflops_basis"),
        fp8_w8a8_supported=bool(entry.get("fp8_w8a8_in_vllm")),
        power_limit_w=None if power is None else float(power),
        unverified_fields=frozenset(entry.get("unverified", ())),
        notes=entry.get("notes"),
        sources=tuple(entry.get("sources", ())),
    )


@functools.lru_cache(maxsize=1)
def all_specs() -> tuple[GpuSpec, ...]:
    """Every GPU in ``resources/gpus.json``, in file order (most common boards first)."""
    text = (resources.files("kvpilot.resources") / "gpus.json").read_text(encoding="utf-8")
    return tuple(_spec(e) for e in json.loads(text)["gpus"])


@functools.lru_cache(maxsize=1)
def _indexes() -> tuple[dict[str, GpuSpec], dict[str, tuple[GpuSpec, ...]]]:
    by_pci: dict[str, GpuSpec] = {}
    by_name: dict[str, list[GpuSpec]] = {}
    for spec in all_specs():
        for pci in spec.pci_device_ids:
            key = normalize_pci_device_id(pci)
            if key:
                by_pci.setdefault(key, spec)
        names = {spec.name, spec.short_name, *spec.nvml_names, *spec.aliases}
        for key in {normalize_name(n) for n in names}:
            by_name.setdefault(key, []).append(spec)
    return by_pci, {k: tuple(v) for k, v in by_name.items()}


def lookup(
    pci_device_id: str | None,
    name: str | None,
    *,
    memory_total_bytes: int | None = None,
) -> GpuSpec | None:
    """The spec of a GPU, by PCI device id first, then by name; None when unknown.

    ``memory_total_bytes`` (NVML's total) picks between boards that share a name, such as the
    8 GB and 16 GB "NVIDIA GeForce RTX 4060 Ti"; without it the first listed wins.
    """
    by_pci, by_name = _indexes()
    if pci_device_id:
        key = normalize_pci_device_id(pci_device_id)
        if key and key in by_pci:
            return by_pci[key]
    if not name:
        return None
    key = normalize_name(name)
    candidates = by_name.get(key) or (by_name.get("rtx" + key, ()) if key.isdigit() else ())
    if not candidates:
        return None
    if memory_total_bytes is not None and len(candidates) > 1:
        return min(candidates, key=lambda s: abs(s.memory_total_bytes - memory_total_bytes))
    return candidates[0]
