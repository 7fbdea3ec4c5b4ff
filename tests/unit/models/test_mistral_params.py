"""A Mistral-format params.json read as vLLM's --config-format mistral reads it, checked against
the same checkpoint's own config.json (mistralai/Devstral-Small-2507, both files in
tests/data/models/devstral-small-2507, SOURCE.txt)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fitkit import MODELS

from kvpilot.core.fit import kv
from kvpilot.core.models.local import load_local_model
from kvpilot.core.models.mistral_params import config_from_mistral_params

DEVSTRAL = MODELS / "devstral-small-2507"


def test_params_json_maps_to_the_hf_keys():
    params = json.loads((DEVSTRAL / "params.json").read_text())
    hf = json.loads((DEVSTRAL / "config.json").read_text())
    cfg = config_from_mistral_params(params)
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "head_dim", "vocab_size", "rms_norm_eps", "rope_theta"):
        assert cfg[key] == hf[key], key
    assert cfg["architectures"] == hf["architectures"] == ["MistralForCausalLM"]
    assert cfg["tie_word_embeddings"] is False and hf["tie_word_embeddings"] is False
    # params.json states no length: vLLM's default of 128,000 (config.json says 131,072)
    assert cfg["max_position_embeddings"] == 128_000


def test_a_directory_with_params_json_only_is_planned(tmp_path: Path):
    root = tmp_path / "devstral"
    root.mkdir()
    for name in ("params.json", "model.safetensors.index.json"):
        shutil.copy(DEVSTRAL / name, root / name)
    spec = load_local_model(root)
    assert spec.architecture == "MistralForCausalLM"
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (40, 8, 128)
    assert kv.kv_layout(spec).kv_bytes_per_token == 163_840
    assert spec.weights_bytes == 47_144_806_400  # the index's total_size
    assert spec.max_position_embeddings == 128_000


def test_sliding_window_list_and_moe_follow_vllm():
    cfg = config_from_mistral_params({
        "dim": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16,
        "hidden_dim": 128, "vocab_size": 100, "norm_eps": 1e-5,
        "sliding_window": [None, 32], "moe": {"num_experts": 8, "num_experts_per_tok": 2},
    })
    assert cfg["layer_types"] == ["full_attention", "sliding_attention"] * 2
    assert cfg["sliding_window"] == 32
    assert cfg["architectures"] == ["MixtralForCausalLM"]
    assert (cfg["num_local_experts"], cfg["num_experts_per_tok"]) == (8, 2)
