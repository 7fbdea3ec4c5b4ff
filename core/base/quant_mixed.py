"""ModelOpt MIXED_PRECISION checkpoints: each module stored with its own algorithm.

NVIDIA's mixed checkpoints (``quant_algo: MIXED_PRECISION``, e.g. nvidia/Qwen3.6-27B-NVFP4)
list every quantized module in ``quantized_layers`` (config.json's ``quantization_config``, or
``quantization`` of the older ``hf_quant_config.json``): ``{"model.language_model.layers.0.
mlp.gate_proj": {"quant_algo": "W4A16_NVFP4", "group_size": 16}, ...}``. vLLM's
``ModelOptMixedPrecisionConfig`` (``quantization/modelopt.py``, 0.28.0 wheel) resolves a layer by
its name, then through the shards of a fused projection, then by any listed child; a module it
does not find stays in the checkpoint dtype. The same lookup is done here on the checkpoint's
module names (:func:`kvpilot.core.base.quant_ignore.module_prefixes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from kvpilot.core.base.quant_ignore import module_names, module_prefixes

#: ModelOpt's algorithm names of the formats priced here
ALGO_FP8 = "FP8"
NVFP4_ALGOS = frozenset({"NVFP4", "W4A16_NVFP4"})
MIXED_PRECISION = "MIXED_PRECISION"

#: kvpilot's fused projections -> the checkpoint's shard names (vLLM's packed modules)
_SHARDS: dict[str, tuple[str, ...]] = {
    "linear_attn.in_proj_qkvz": ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z"),
    "linear_attn.in_proj_ba": ("linear_attn.in_proj_a", "linear_attn.in_proj_b"),
    "self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    "mlp.gate_up_proj": ("mlp.gate_proj", "mlp.up_proj"),
}


@dataclass(frozen=True)
class MixedPrecision:
    """The ``quantized_layers`` of a MIXED_PRECISION checkpoint: (module name, algorithm)."""

    layers: tuple[tuple[str, str], ...]

    @property
    def algorithms(self) -> frozenset[str]:
        """Every algorithm the checkpoint uses."""
        return frozenset(algo for _, algo in self.layers)

    def algo_of(self, architecture: str, submodule: str, layer: int | None) -> str | None:
        """The algorithm of ``submodule`` (``mlp.gate_proj``) in decoder layer ``layer`` (None:
        a module of the text model itself, e.g. ``lm_head``); None when it is not quantized."""
        return _algo_of(self, module_prefixes(architecture), submodule, layer)


def mixed_from_config(qcfg: Mapping[str, Any] | None) -> MixedPrecision | None:
    """The per-module algorithms of a ModelOpt MIXED_PRECISION ``quantization_config`` (None
    for any other section)."""
    if not isinstance(qcfg, Mapping):
        return None
    nested = qcfg.get("quantization")
    section: Mapping[str, Any] = nested if isinstance(nested, Mapping) else qcfg
    if str(section.get("quant_algo") or "").upper() != MIXED_PRECISION:
        return None
    raw = section.get("quantized_layers")
    if not isinstance(raw, Mapping):
        return None
    layers = tuple(
        (str(name), str(info.get("quant_algo") or "").upper())
        for name, info in raw.items() if isinstance(info, Mapping) and info.get("quant_algo")
    )
    return MixedPrecision(layers) if layers else None


@lru_cache(maxsize=64)
def _index(mixed: MixedPrecision) -> dict[str, str]:
    return dict(mixed.layers)


@lru_cache(maxsize=8192)
def _algo_of(mixed: MixedPrecision, prefixes: tuple[str, ...], submodule: str,
             layer: int | None) -> str | None:
    index = _index(mixed)
    names = module_names(prefixes, submodule, layer)
    for name in names:
        if name in index:
            return index[name]
    shards = _SHARDS.get(submodule)
    if shards:
        found = {index[n] for s in shards for n in module_names(prefixes, s, layer) if n in index}
        if len(found) == 1:
            return found.pop()
    for name in names:  # a parent module: any child it lists (routed experts)
        dotted = name + "."
        for key, algo in mixed.layers:
            if key.startswith(dotted):
                return algo
    for name in names:  # a child of a listed module (``mlp.experts`` for each expert's proj)
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            parent = ".".join(parts[:cut])
            if parent in index:
                return index[parent]
    return None
