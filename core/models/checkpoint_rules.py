"""Which quantized checkpoints run on which GPU: the weight scheme and its compute capability.

A checkpoint's ``quantization_config`` (as its ``config.json`` or the Hub's listing holds it) is
reduced to one scheme name, and each scheme has the compute capability vLLM's kernels need:

* ``awq`` / ``gptq``: 4- or 8-bit integer weights, Marlin kernels from sm_75;
* ``w4a16``: compressed-tensors 4-bit integer weights, 16-bit activations (Marlin), sm_75;
* ``w8a8-int8``: compressed-tensors 8-bit integer weights and activations, sm_75;
* ``fp8``: FP8 weights and activations (W8A8) from sm_89 (Ada); from sm_75 vLLM runs them as
  weight-only FP8 through Marlin (W8A16, :func:`caveat` says so);
* ``mxfp4``: OCP microscaling FP4 (gpt-oss), sm_80;
* ``nvfp4``: NVIDIA FP4 with 16-element groups: FP4 tensor cores on Blackwell (sm_100 data
  centre, sm_120 consumer); elsewhere vLLM runs them as weight-only FP4 through its Marlin
  kernel, from 0.10 on sm_80+ and from 0.20 on sm_75+ (:func:`caveat` says so), and refuses
  them on older releases or cards;
* ``16-bit``: no quantization; ``other``: a method these rules do not know (not refused here:
  :func:`kvpilot.core.fit.support.check_support` has the last word).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvpilot.core.base import versions
from kvpilot.core.base.model_spec import Quantization
from kvpilot.core.base.quant_mixed import (
    ALGO_FP8,
    NVFP4_ALGOS,
    MixedPrecision,
    mixed_from_config,
)

SCHEME_16BIT = "16-bit"
SCHEME_AWQ = "awq"
SCHEME_GPTQ = "gptq"
SCHEME_W4A16 = "w4a16"
SCHEME_W8A8_INT8 = "w8a8-int8"
SCHEME_FP8 = "fp8"
SCHEME_MXFP4 = "mxfp4"
SCHEME_NVFP4 = "nvfp4"
SCHEME_OTHER = "other"

#: lowest compute capability per scheme (NVFP4: see :data:`NVFP4_MAJORS`)
MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    SCHEME_AWQ: (7, 5),
    SCHEME_GPTQ: (7, 5),
    SCHEME_W4A16: (7, 5),
    SCHEME_W8A8_INT8: (7, 5),
    SCHEME_FP8: (7, 5),
    SCHEME_MXFP4: (8, 0),
}
#: FP8 W8A8 (FP8 tensor cores) from here; below, weight-only
FP8_W8A8_CAPABILITY = (8, 9)
#: compute-capability majors with FP4 tensor cores (sm_100 B200/GB200, sm_120 RTX 50 / PRO 6000)
NVFP4_MAJORS = (10, 12)
#: NVFP4 scales every 16 weights; MXFP4 every 32; integer 4-bit schemes 32..128
NVFP4_GROUP_SIZE = 16


@dataclass(frozen=True)
class SizedCheckpoint:
    """One checkpoint as a GPU sees it: repo, scheme, weight bytes (None: not known yet) and
    where they came from (``catalog``, ``hub`` when the Hub counted them, ``estimate`` from the
    byte model), why this GPU refuses it (:func:`refusal`; "" when it does not, or no GPU was
    given) and ``note``, how it runs differently there (:func:`caveat`; "" when as built)."""

    repo: str
    scheme: str
    weights_bytes: int | None
    weights_source: str
    refused: str = ""
    note: str = ""


def _first_group_part(qcfg: Mapping[str, Any], part: str) -> Mapping[str, Any] | None:
    """The first ``config_groups`` entry's ``part`` (``weights``, ``input_activations``) of a
    compressed-tensors ``quantization_config``; None when no group has one."""
    groups = qcfg.get("config_groups")
    if isinstance(groups, Mapping):
        for group in groups.values():
            found = group.get(part) if isinstance(group, Mapping) else None
            if isinstance(found, Mapping):
                return found
    return None


def scheme_of(qcfg: Mapping[str, Any] | None) -> str:
    """The scheme of a ``quantization_config`` (None: a 16-bit checkpoint)."""
    if not qcfg:
        return SCHEME_16BIT
    method = str(qcfg.get("quant_method") or "").lower().replace("_", "-")
    if method in ("awq", "auto-awq", "awq-marlin"):
        return SCHEME_AWQ
    if method in ("gptq", "auto-gptq", "gptq-marlin") or (not method and "bits" in qcfg):
        return SCHEME_GPTQ
    if method == "fp8":
        return SCHEME_FP8
    if method == "mxfp4":
        return SCHEME_MXFP4
    if method == "modelopt":
        algo = str(qcfg.get("quant_algo") or "").upper()
        mixed = mixed_from_config(qcfg)
        if mixed is not None:
            return _mixed_scheme(mixed)
        return SCHEME_NVFP4 if "FP4" in algo else SCHEME_FP8 if "FP8" in algo else SCHEME_OTHER
    if method == "compressed-tensors":
        if "nvfp4" in str(qcfg.get("format") or "").lower():
            return SCHEME_NVFP4
        weights = _first_group_part(qcfg, "weights") or {}
        bits = weights.get("num_bits")
        kind = str(weights.get("type") or "int").lower()
        acts = _first_group_part(qcfg, "input_activations")
        if bits == 4 and kind == "float":
            return SCHEME_NVFP4 if weights.get("group_size") == NVFP4_GROUP_SIZE else SCHEME_MXFP4
        if bits == 8 and kind == "float":
            return SCHEME_FP8
        if bits == 8 and acts is not None:
            return SCHEME_W8A8_INT8
        if bits in (4, 8):
            return SCHEME_W4A16
    return SCHEME_OTHER


def _mixed_scheme(mixed: MixedPrecision) -> str:
    """A MIXED_PRECISION checkpoint's scheme: the narrowest format it uses."""
    if mixed.algorithms & NVFP4_ALGOS:
        return SCHEME_NVFP4
    return SCHEME_FP8 if ALGO_FP8 in mixed.algorithms else SCHEME_OTHER


def scheme_of_quantization(quant: Quantization | None) -> str:
    """The scheme of a parsed :class:`Quantization` (what a catalog checkpoint holds)."""
    if quant is None:
        return SCHEME_16BIT
    method = quant.method.lower()
    if method in ("awq", "gptq", "fp8", "mxfp4"):
        return method
    if quant.mixed is not None:
        return _mixed_scheme(quant.mixed)
    if method in ("modelopt-fp4", "modelopt_fp4", "nvfp4") or (
        method == "modelopt" and quant.group_size == NVFP4_GROUP_SIZE
    ):
        return SCHEME_NVFP4
    if method == "compressed-tensors":
        if quant.bits == 4 and quant.group_size == NVFP4_GROUP_SIZE:
            return SCHEME_NVFP4
        if quant.bits == 8:
            return SCHEME_FP8
        return SCHEME_W4A16
    return SCHEME_OTHER


def nvfp4_marlin_floor(vllm_version: str | None) -> tuple[int, int] | None:
    """The lowest compute capability on which ``vllm_version`` runs NVFP4 weights through its
    Marlin FP4 kernel (None: that release has no such path; an unknown release: the newest)."""
    if versions.supports("nvfp4_marlin_sm75", vllm_version):
        return (7, 5)
    if versions.supports("nvfp4_marlin_sm80", vllm_version):
        return (8, 0)
    return None


def refusal(scheme: str, compute_capability: tuple[int, int] | None,
            vllm_version: str | None = None) -> str | None:
    """Why a ``scheme`` checkpoint cannot run on a card of ``compute_capability`` with
    ``vllm_version`` (None: the newest release kvpilot knows) — None when it can, or the card
    is unknown."""
    if compute_capability is None:
        return None
    major, minor = compute_capability
    if scheme == SCHEME_NVFP4:
        floor = nvfp4_marlin_floor(vllm_version)
        if major in NVFP4_MAJORS or (floor is not None and compute_capability >= floor):
            return None
        release = f"vLLM {vllm_version}" if vllm_version else "vLLM"
        return (
            f"NVFP4 weights need FP4 tensor cores (sm_100 or sm_120, Blackwell) or vLLM's "
            f"Marlin FP4 kernel (vLLM 0.10+ on sm_80+, 0.20+ on sm_75+); this GPU is "
            f"sm_{major}{minor} with {release}. Pick the AWQ, GPTQ or FP8 checkpoint instead."
        )
    need = MIN_CAPABILITY.get(scheme)
    if need is not None and compute_capability < need:
        return (
            f"{scheme} weights need compute capability {need[0]}.{need[1]}; this GPU is "
            f"{major}.{minor}. Pick another checkpoint."
        )
    return None


def caveat(scheme: str, compute_capability: tuple[int, int] | None,
           vllm_version: str | None = None) -> str:
    """How a runnable checkpoint runs differently on this card ("" when it runs as built)."""
    if (
        scheme == SCHEME_NVFP4 and compute_capability is not None
        and compute_capability[0] not in NVFP4_MAJORS
        and refusal(scheme, compute_capability, vllm_version) is None
    ):
        major, minor = compute_capability
        return (f"no FP4 tensor cores on sm_{major}{minor}: vLLM runs these weights through its "
                "Marlin FP4 kernel (weight-only, W4A16), so prefill is slower than on Blackwell")
    if (
        scheme == SCHEME_FP8 and compute_capability is not None
        and compute_capability < FP8_W8A8_CAPABILITY
        and refusal(scheme, compute_capability) is None
    ):
        major, minor = compute_capability
        return (f"no FP8 tensor cores on sm_{major}{minor}: vLLM runs these weights as "
                "weight-only FP8 (Marlin, W8A16), so prefill is slower than on sm_89+")
    return ""


def support_refusal(quant: Quantization | None, compute_capability: tuple[int, int] | None,
                    vllm_version: str | None = None) -> str | None:
    """Why a parsed quantization cannot run on the card with ``vllm_version``, for the rule
    of NVFP4 (tensor cores or the release's Marlin FP4 kernel); None otherwise."""
    scheme = scheme_of_quantization(quant)
    return refusal(scheme, compute_capability, vllm_version) if scheme == SCHEME_NVFP4 else None
