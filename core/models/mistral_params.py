"""A Mistral-format checkpoint's ``params.json`` read as the config.json vLLM builds from it.

Some Mistral releases (Devstral Small 2505 / 2507, Magistral Small) ship only ``params.json``
and ``consolidated.safetensors`` beside (or instead of) a Hugging Face ``config.json``; vLLM
serves them with ``--config-format mistral`` (``transformers_utils/configs/mistral.py``
``adapt_config_dict``, read in the 0.21.0 wheel). That function renames the Mistral keys
(``dim`` -> ``hidden_size``, ``n_layers`` -> ``num_hidden_layers``, ``n_heads`` ->
``num_attention_heads``, ``n_kv_heads`` -> ``num_key_value_heads``, ``hidden_dim`` ->
``intermediate_size``, ``norm_eps`` -> ``rms_norm_eps``), defaults ``tied_embeddings`` to False
and ``max_position_embeddings`` / ``max_seq_len`` to 128,000, turns a per-layer
``sliding_window`` list into ``layer_types``, names the architecture ``MixtralForCausalLM`` when
a ``moe`` section is present and ``MistralForCausalLM`` otherwise, and wraps a checkpoint with a
``vision_encoder`` (or ``multimodal.vision_encoder_args``) as ``PixtralForConditionalGeneration``.
vLLM's placeholder ``model_type`` ``transformer`` is read as ``mistral`` here, the text model
its ``MistralForCausalLM`` builds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PARAMS_FILE = "params.json"

#: Mistral key -> Hugging Face key (vLLM's ``_remap_general_mistral_args``)
_RENAMES = {
    "dim": "hidden_size",
    "norm_eps": "rms_norm_eps",
    "n_kv_heads": "num_key_value_heads",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "hidden_dim": "intermediate_size",
}
_DEFAULT_MAX_LEN = 128_000


def config_from_mistral_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The config.json-shaped dict vLLM derives from ``params`` (see the module doc).

    Only the renames and defaults above are applied; every other key is kept as it is.
    """
    config: dict[str, Any] = dict(params)
    for old, new in _RENAMES.items():
        if old in config:
            config[new] = config.pop(old)
    config["model_type"] = config.pop("model_type", "transformer")
    config["hidden_act"] = config.pop("activation", "silu")
    config["tie_word_embeddings"] = config.pop("tied_embeddings", False)
    max_len = config.get("max_position_embeddings", _DEFAULT_MAX_LEN)
    config["max_seq_len"] = config.pop("max_seq_len", max_len)
    config["max_position_embeddings"] = config.pop("max_position_embeddings", _DEFAULT_MAX_LEN)
    window = config.get("sliding_window")
    layers = config.get("num_hidden_layers")
    if isinstance(window, list) and window and isinstance(layers, int):
        pattern = window * (layers // len(window))
        config["layer_types"] = [
            "full_attention" if w is None else "sliding_attention" for w in pattern
        ]
        config["sliding_window"] = next((w for w in window if w is not None), None)
    moe = config.get("moe")
    if isinstance(moe, Mapping) and moe:
        config["architectures"] = ["MixtralForCausalLM"]
        config["model_type"] = "mixtral"
        if "num_experts" in moe:
            config["num_local_experts"] = moe["num_experts"]
        if "num_experts_per_tok" in moe:
            config["num_experts_per_tok"] = moe["num_experts_per_tok"]
    else:
        config["architectures"] = ["MistralForCausalLM"]
        if config["model_type"] == "transformer":
            config["model_type"] = "mistral"
    multimodal = config.get("multimodal")
    vision = (multimodal.get("vision_encoder_args") if isinstance(multimodal, Mapping)
              else None) or config.get("vision_encoder")
    if vision:
        text = {k: v for k, v in config.items() if k not in ("multimodal", "vision_encoder")}
        return {
            "model_type": "pixtral",
            "architectures": ["PixtralForConditionalGeneration"],
            "text_config": text,
            "vision_config": dict(vision) if isinstance(vision, Mapping) else {},
        }
    return config
