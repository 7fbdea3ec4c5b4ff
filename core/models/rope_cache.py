"""The RoPE cos/sin tables vLLM builds on the GPU when it loads a model.

Each attention layer asks ``get_rope`` (``model_executor/layers/rotary_embedding``, read in the
0.28.0 wheel) for a rotary embedding; layers asking with the same head size, rotary width,
length, parameters and dtype share one table (``_ROPE_DICT``). A table is a non-persistent
buffer ``cos_sin_cache`` of ``length x rotary_dim`` elements (cos and sin halves side by side) in
the model's dtype, so it is part of what "Model loading took" reports but of no checkpoint file.

The length follows the rope type: ``max_position_embeddings`` for the default, ``llama3``,
``mrope`` and Gemma 4's ``proportional`` tables; times the factor for ``linear`` and
``dynamic`` scaling; ``original_max_position_embeddings`` times the factor for ``yarn`` and
``deepseek_yarn``; the short and the long table together for Phi-3's ``longrope``. Gemma 4's
proportional table is as wide as the head (the unrotated part padded), gpt-oss builds its table
in float32, MLA rotates ``qk_rope_head_dim`` only. Layers without positions (NoPE, Mamba,
linear attention) ask for none.

Sizes: Llama 3.1 8B 32 MiB, Qwen3 8B 10 MiB, Gemma 4 E2B/E4B/26B/31B 192 MiB (a 256-wide sliding
table and a 512-wide global one over 131,072 positions), Llama 4 Scout 2.5 GiB (10,485,760
positions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: model types whose attention layers use no rotary embedding
_NO_ROPE_MODEL_TYPES = frozenset({"nemotron_h", "mamba", "mamba2", "falcon_mamba", "jamba"})
#: rope types whose table spans ``max_position_embeddings x factor``
_SCALED_LENGTH = frozenset({"linear", "dynamic"})
#: rope types whose table spans ``original_max_position_embeddings x factor``
_ORIGINAL_TIMES_FACTOR = frozenset({"yarn", "deepseek_yarn", "deepseek_llama_scaling"})


@dataclass(frozen=True)
class RopeTable:
    """One ``cos_sin_cache`` buffer: ``positions`` rows of ``rotary_dim`` elements."""

    positions: int
    rotary_dim: int
    elem_bytes: int

    @property
    def bytes(self) -> int:
        """Size in bytes."""
        return self.positions * self.rotary_dim * self.elem_bytes


def _number(value: Any, default: float) -> float:  # noqa: ANN401 - a config.json value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return default


def _table(params: Mapping[str, Any], head_size: int, max_position: int, elem_bytes: int,
           partial: float) -> RopeTable:
    """The table ``get_rope`` builds for one set of rope parameters."""
    rope_type = str(params.get("rope_type") or params.get("type") or "default")
    partial = _number(params.get("partial_rotary_factor"), partial)
    rotary = int(_number(params.get("rope_dim"), head_size * partial))
    if rope_type == "proportional":  # Gemma 4: rotates the whole head, zeros past the factor
        rotary = head_size
    factor = _number(params.get("factor"), 1.0)
    positions = max_position
    if rope_type in _SCALED_LENGTH:
        positions = int(max_position * factor)
    elif rope_type in _ORIGINAL_TIMES_FACTOR:
        original = int(_number(params.get("original_max_position_embeddings"), max_position))
        positions = int(original * factor)
    elif rope_type == "longrope":
        original = int(_number(params.get("original_max_position_embeddings"), max_position))
        positions = original + max_position
    return RopeTable(positions=positions, rotary_dim=rotary, elem_bytes=elem_bytes)


def _rope_params(text: Mapping[str, Any]) -> Mapping[str, Any]:
    params = text.get("rope_parameters")
    if not isinstance(params, Mapping):
        params = text.get("rope_scaling")
    params = params if isinstance(params, Mapping) else {}
    # transformers 4 keeps Phi-3's original length beside rope_scaling; vLLM moves it in
    if "original_max_position_embeddings" not in params and isinstance(
            text.get("original_max_position_embeddings"), int):
        params = {**params,
                  "original_max_position_embeddings": text["original_max_position_embeddings"]}
    return params


def rope_tables(
    text: Mapping[str, Any],
    *,
    model_type: str,
    head_dim: int,
    max_position: int,
    layer_types: Sequence[str] = (),
    global_head_dim: int | None = None,
    qk_rope_head_dim: int | None = None,
    elem_bytes: int = 2,
) -> tuple[RopeTable, ...]:
    """The distinct rope tables of a text model (``text``: its config.json section).

    ``max_position``: the model's ``max_position_embeddings``; ``elem_bytes``: the serving
    dtype's width (the model dtype; gpt-oss builds its table in float32 whatever it is).
    """
    if model_type in _NO_ROPE_MODEL_TYPES or str(
            text.get("position_embedding_type") or "rope") in ("nope", "none"):
        return ()
    if layer_types and not any("attention" in t and "linear" not in t for t in layer_types):
        return ()
    partial = _number(text.get("partial_rotary_factor"), 1.0)
    params = _rope_params(text)
    per_type = text.get("rope_parameters")
    if isinstance(per_type, Mapping) and any(isinstance(per_type.get(k), Mapping)
                                             for k in ("sliding_attention", "full_attention")):
        # one table per layer type (Gemma 3 / 4 configs of transformers 5); Gemma 4's global
        # layers have their own head size
        tables = []
        for kind in ("sliding_attention", "full_attention"):
            kind_params = per_type.get(kind)
            if isinstance(kind_params, Mapping) and (kind in layer_types or not layer_types):
                size = (global_head_dim or head_dim) if kind == "full_attention" else head_dim
                tables.append(_table(kind_params, size, max_position, elem_bytes, partial))
        return tuple(tables)
    if model_type.startswith("gemma3"):
        # Gemma 3 (transformers 4 configs): the sliding layers' default table (theta
        # rope_local_base_freq) beside the global layers' scaled one
        local = _table({}, head_dim, max_position, elem_bytes, partial)
        return (local, _table(params, head_dim, max_position, elem_bytes, partial))
    if model_type == "gpt_oss":
        elem_bytes = 4
    if qk_rope_head_dim:
        return (_table({**params, "rope_dim": qk_rope_head_dim}, head_dim, max_position,
                       elem_bytes, 1.0),)
    return (_table(params, head_dim, max_position, elem_bytes, partial),)


def rope_cache_bytes(*tables: RopeTable) -> int:
    """Bytes of the tables together."""
    return sum(t.bytes for t in tables)


def model_rope_bytes(text: Mapping[str, Any], model_type: str, head_dim: int, max_len: int,
                     layer_types: Sequence[str], qk_rope_head_dim: int | None) -> int:
    """Bytes of a text model's rope tables, from its config.json section (``max_len``: the
    length kvpilot read, used when ``max_position_embeddings`` is absent)."""
    max_position = int(_number(text.get("max_position_embeddings"), max_len))
    global_head = text.get("global_head_dim")
    return rope_cache_bytes(*rope_tables(
        text, model_type=model_type, head_dim=head_dim, max_position=max_position,
        layer_types=layer_types, qk_rope_head_dim=qk_rope_head_dim,
        global_head_dim=global_head if isinstance(global_head, int) else None,
    ))
