"""Checkpoint tensors vLLM's loader skips unless MTP speculative decoding is on.

Several 2026 checkpoints ship their multi-token-prediction (MTP) block beside the model. Plain
``vllm serve`` never loads it; ``--speculative-config '{"method": "mtp"}'`` loads it into a
second (draft) model. So a weight size read from the checkpoint's files (safetensors headers,
``model.safetensors.index.json``, the Hub's safetensors metadata) holds bytes that the served
model does not take. The rules follow the release code (``model_executor/models``, read in the
0.20.0 and 0.21.0 wheels):

* Qwen3-Next, Qwen3.5 / 3.6 (``qwen3_next.py``, ``qwen3_5.py``): every ``load_weights`` skips a
  name starting with ``mtp.`` (``AutoWeightsLoader(skip_prefixes=["mtp."])`` and an explicit
  ``if name.startswith("mtp."): continue``), whatever ``mtp_num_hidden_layers`` says.
* GLM-4.5 / 4.6 / 4.7 and their Air / Flash variants (``glm4_moe.py``, ``glm4_moe_lite.py``)
  and DeepSeek-V3-style models (``deepseek_v2.py``): ``get_spec_layer_idx_from_weight_name``
  skips the decoder layers numbered ``num_hidden_layers`` to
  ``num_hidden_layers + num_nextn_predict_layers - 1`` (names containing ``layers.{i}.``; the
  DeepSeek form requires the name to start with ``model.layers.{i}.`` or ``layers.{i}.``), and
  only when the config declares ``num_nextn_predict_layers`` > 0.

With MTP speculative decoding on, the draft model (``qwen3_5_mtp.py``, ``glm4_moe_mtp.py``,
``deepseek_mtp.py``) loads exactly these tensors, so the planner adds them back there, less the
MTP block's own copies of the embedding and output head (GLM-4.x and DeepSeek checkpoints store
them in the MTP layer), which the drafter drops for the target's (:func:`is_shared_copy`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: model types whose loaders drop every ``mtp.``-prefixed tensor
_MTP_PREFIX_TYPES = frozenset({
    "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text",
})
#: model types whose loaders drop the decoder layers past ``num_hidden_layers``
_NEXTN_LAYER_TYPES = frozenset({"glm4_moe", "glm4_moe_lite"})
_DEEPSEEK_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "kimi_k2"})


@dataclass(frozen=True)
class MtpRule:
    """Which tensor names of a checkpoint are its MTP block, as vLLM's loader tells them apart.

    ``prefix``: names starting with it (``"mtp."``) are MTP tensors; ``layer_indices``: decoder
    layers whose tensors are MTP tensors; ``anchored``: those layer names must start with
    ``model.layers.{i}.`` or ``layers.{i}.`` (DeepSeek) rather than merely contain
    ``layers.{i}.`` (GLM).
    """

    prefix: str | None = None
    layer_indices: tuple[int, ...] = ()
    anchored: bool = False

    def matches(self, name: str) -> bool:
        """True when vLLM's loader skips tensor ``name`` without speculative decoding."""
        if self.prefix is not None and name.startswith(self.prefix):
            return True
        for i in self.layer_indices:
            if self.anchored:
                if name.startswith((f"model.layers.{i}.", f"layers.{i}.")):
                    return True
            elif f"layers.{i}." in name:
                return True
        return False


def _int(section: Mapping[str, Any], key: str) -> int:
    value = section.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def mtp_rule(config: Mapping[str, Any]) -> MtpRule | None:
    """The MTP rule for a checkpoint's ``config.json``, or None when vLLM skips nothing.

    The text model's section (``text_config``) is read where the config nests one; the model
    type is taken from it or from the top level.
    """
    text = config.get("text_config")
    section: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    types = {str(config.get("model_type", "")), str(section.get("model_type", ""))}
    if types & _MTP_PREFIX_TYPES:
        return MtpRule(prefix="mtp.")
    nextn = _int(section, "num_nextn_predict_layers") or _int(config, "num_nextn_predict_layers")
    layers = _int(section, "num_hidden_layers") or _int(config, "num_hidden_layers")
    if nextn <= 0 or layers <= 0:
        return None
    indices = tuple(range(layers, layers + nextn))
    if types & _NEXTN_LAYER_TYPES:
        return MtpRule(layer_indices=indices)
    if types & _DEEPSEEK_TYPES:
        return MtpRule(layer_indices=indices, anchored=True)
    return None


def mtp_tensor_names(rule: MtpRule | None, names: Iterable[str]) -> tuple[str, ...]:
    """The names among ``names`` that ``rule`` marks as MTP tensors (sorted)."""
    if rule is None:
        return ()
    return tuple(sorted(n for n in names if rule.matches(n)))


#: name parts of the MTP block's own copies of the embedding and the output head: the drafter
#: loads them, then drops them for the target's (``_maybe_share_embeddings`` /
#: ``_maybe_share_lm_head`` share both for every MTP drafter, the embedding with one pipeline
#: stage, ``v1/spec_decode/llm_base_proposer.py`` in the 0.20.0, 0.27.1 and 0.32.0 wheels), so
#: they take no memory once loaded
_SHARED_COPY_PARTS = ("embed_tokens.", "shared_head.head.", "lm_head.")


def is_shared_copy(name: str) -> bool:
    """True for an MTP tensor that copies the target's embedding or output head."""
    return any(part in name for part in _SHARED_COPY_PARTS)


def mtp_bytes_from_headers(rule: MtpRule | None, headers: Iterable[Mapping[str, Any]],
                           *, shared_copies_only: bool = False) -> int:
    """Bytes of the MTP tensors in safetensors headers (``data_offsets`` end - begin); with
    ``shared_copies_only`` those of the copies :func:`is_shared_copy` names.

    Entries that are not tensor records (``__metadata__``, malformed ones) count nothing; the
    header reader has validated them already.
    """
    if rule is None:
        return 0
    total = 0
    for header in headers:
        for name, entry in header.items():
            if name == "__metadata__" or not rule.matches(name) or not isinstance(entry, Mapping):
                continue
            if shared_copies_only and not is_shared_copy(name):
                continue
            offsets = entry.get("data_offsets")
            if (isinstance(offsets, list) and len(offsets) == 2
                    and all(isinstance(x, int) for x in offsets)):
                total += offsets[1] - offsets[0]
    return total


def mtp_share_of_index(
    rule: MtpRule | None, weight_map: Mapping[str, Any], total_bytes: int,
    embedding_bytes: int = 0,
) -> int:
    """Bytes of the MTP tensors when only an index's ``weight_map`` and ``total_size`` are known.

    The index names tensors but gives no sizes. MTP blocks are decoder layers of the model's own
    widths, so their share is estimated as the layer bytes per decoder layer: (``total_bytes`` -
    ``embedding_bytes``) spread over the main layers plus the MTP layers, times the MTP layers.
    Returns 0 when the index names no MTP tensor.
    """
    names = mtp_tensor_names(rule, (str(k) for k in weight_map))
    if not names or total_bytes <= 0:
        return 0
    main_layers: set[int] = set()
    mtp_layers: set[str] = set()
    for key in weight_map:
        name = str(key)
        if name in names:
            mtp_layers.add(_layer_key(name))
            continue
        index = _layer_number(name)
        if index is not None:
            main_layers.add(index)
    n_mtp = max(1, len(mtp_layers))
    n_main = len(main_layers)
    if n_main <= 0:
        return 0
    body = max(0, total_bytes - embedding_bytes)
    return body * n_mtp // (n_main + n_mtp)


def _layer_number(name: str) -> int | None:
    marker = "layers."
    at = name.find(marker)
    if at < 0:
        return None
    digits = ""
    for ch in name[at + len(marker):]:
        if not ch.isdigit():
            break
        digits += ch
    return int(digits) if digits else None


def _layer_key(name: str) -> str:
    """One key per MTP layer (``mtp.layers.0`` / ``model.layers.92``; ``mtp.fc`` and the MTP
    norms join the first MTP layer)."""
    number = _layer_number(name)
    return str(number) if number is not None else "0"
