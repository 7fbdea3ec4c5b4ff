"""The MTP tensors vLLM skips without speculative decoding, left out of a checkpoint's size.

Rules read from the real config.json fixtures (tests/data/models/*/SOURCE.txt); the
safetensors files are written here with the tensor names those checkpoints use (``mtp.*`` for
Qwen3.5 / 3.6, ``model.layers.{num_hidden_layers}.*`` for DeepSeek-V3 / GLM).
"""

from __future__ import annotations

import json
from pathlib import Path

from testpaths import DATA

from kvpilot.core.base.model_spec import SOURCE_FILE, SOURCE_INDEX
from kvpilot.core.models.local import load_local_model
from kvpilot.core.models.mtp_weights import (
    MtpRule,
    is_shared_copy,
    mtp_bytes_from_headers,
    mtp_rule,
    mtp_share_of_index,
    mtp_tensor_names,
)
from kvpilot.core.models.weights import checkpoint_weight_size, read_safetensors_header


def _config(name: str) -> dict[str, object]:
    data = json.loads((DATA / "models" / name / "config.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_qwen35_and_36_and_next_skip_the_mtp_prefix():
    for name in ("qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.6-35b-a3b",
                 "qwen3-next-80b-a3b-thinking"):
        rule = mtp_rule(_config(name))
        assert rule == MtpRule(prefix="mtp."), name
        assert rule.matches("mtp.fc.weight")
        assert rule.matches("mtp.layers.0.mlp.experts.3.down_proj.weight")
        assert not rule.matches("model.language_model.layers.3.mlp.gate.weight")
        assert not rule.matches("model.visual.blocks.0.attn.qkv.weight")


def test_deepseek_v3_skips_the_layers_past_num_hidden_layers():
    cfg = _config("deepseek-v3")
    assert (cfg["num_hidden_layers"], cfg["num_nextn_predict_layers"]) == (61, 1)
    rule = mtp_rule(cfg)
    assert rule == MtpRule(layer_indices=(61,), anchored=True)
    assert rule.matches("model.layers.61.eh_proj.weight")
    assert rule.matches("model.layers.61.mlp.experts.7.up_proj.weight")
    assert not rule.matches("model.layers.60.self_attn.kv_a_proj_with_mqa.weight")
    assert not rule.matches("model.layers.6.mlp.gate.weight")
    assert not rule.matches("lm_head.weight")


def test_glm_rule_follows_num_nextn_predict_layers():
    # The GLM-4.7 copies in tests/data leave num_nextn_predict_layers out; vLLM's
    # get_spec_layer_idx_from_weight_name then skips nothing, and neither does the rule.
    cfg = _config("glm-4.7-fp8")
    assert "num_nextn_predict_layers" not in cfg
    assert mtp_rule(cfg) is None
    assert mtp_rule(_config("glm-4.7-flash")) is None
    # With the key, the layer right after the last decoder layer is the MTP block
    # (glm4_moe.py matches ``layers.{i}.`` anywhere in the name).
    rule = mtp_rule({**cfg, "num_nextn_predict_layers": 1})
    assert rule == MtpRule(layer_indices=(cfg["num_hidden_layers"],))
    assert rule.matches("model.layers.92.shared_head.head.weight")
    assert not rule.matches("model.layers.91.self_attn.o_proj.weight")


def test_models_without_mtp_have_no_rule():
    for name in ("qwen3-8b", "gemma-4-26b-a4b", "llama-3.1-8b-instruct", "gpt-oss-20b"):
        assert mtp_rule(_config(name)) is None, name
    assert mtp_tensor_names(None, ["mtp.fc.weight"]) == ()


def test_checkpoint_size_leaves_the_mtp_tensors_out(model_copy, st_file):
    d = model_copy("qwen3.5-27b")
    main = st_file(d / "model-00001-of-00002.safetensors", {
        "model.language_model.embed_tokens.weight": ("BF16", [64, 8]),
        "model.language_model.layers.0.mlp.up_proj.weight": ("BF16", [16, 8]),
    })
    mtp = st_file(d / "model-00002-of-00002.safetensors", {
        "mtp.fc.weight": ("BF16", [8, 16]),
        "mtp.layers.0.mlp.up_proj.weight": ("BF16", [16, 8]),
        "lm_head.weight": ("BF16", [64, 8]),
    })
    mtp_only = (8 * 16 + 16 * 8) * 2
    size = checkpoint_weight_size(d, _config("qwen3.5-27b"))
    assert size is not None and size.source == SOURCE_FILE
    assert size.mtp_bytes == mtp_only
    assert size.total_bytes == main + mtp - mtp_only
    assert any("MTP" in note for note in size.notes)
    # Without the config (as before), every tensor counts.
    plain = checkpoint_weight_size(d)
    assert plain is not None and plain.total_bytes == main + mtp and plain.mtp_bytes == 0
    # The local loader passes the config: the spec's weights are what vLLM loads.
    spec = load_local_model(d)
    assert (spec.weights_bytes, spec.mtp_weights_bytes) == (main + mtp - mtp_only, mtp_only)


def test_headers_of_a_model_without_mtp_are_untouched(model_copy, st_file):
    d = model_copy("qwen3-8b")
    n = st_file(d / "model.safetensors", {"mtp.fc.weight": ("BF16", [4, 4])})
    size = checkpoint_weight_size(d, _config("qwen3-8b"))
    assert size is not None and (size.total_bytes, size.mtp_bytes) == (n, 0)


def test_index_alone_estimates_the_mtp_share_per_layer(model_copy):
    d = model_copy("qwen3.5-27b")
    cfg = _config("qwen3.5-27b")
    text = cfg["text_config"]
    assert isinstance(text, dict)
    layers = text["num_hidden_layers"]
    weight_map = {"model.language_model.embed_tokens.weight": "a", "lm_head.weight": "b"}
    for i in range(layers):
        weight_map[f"model.language_model.layers.{i}.mlp.down_proj.weight"] = "a"
    weight_map["mtp.fc.weight"] = "b"
    weight_map["mtp.layers.0.mlp.down_proj.weight"] = "b"
    weight_map["mtp.norm.weight"] = "b"
    total = 55_000_000_000
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}))
    embed = text["vocab_size"] * text["hidden_size"] * 2 * (1 if cfg.get("tie_word_embeddings")
                                                            else 2)
    size = checkpoint_weight_size(d, cfg)
    assert size is not None and size.source == SOURCE_INDEX
    expected = (total - embed) // (layers + 1)
    assert size.mtp_bytes == expected
    assert size.total_bytes == total - expected
    assert any("estimated per layer" in note for note in size.notes)


def test_share_of_index_without_mtp_names_is_zero():
    rule = MtpRule(prefix="mtp.")
    assert mtp_share_of_index(rule, {"model.layers.0.w": "a"}, 10_000) == 0
    assert mtp_share_of_index(None, {"mtp.fc.weight": "a"}, 10_000) == 0


def test_bytes_from_headers_use_the_byte_ranges(tmp_path: Path, st_file):
    f = tmp_path / "model.safetensors"
    st_file(f, {"model.layers.61.enorm.weight": ("BF16", [7168]),
                "model.layers.60.input_layernorm.weight": ("BF16", [7168])})
    header = read_safetensors_header(f)
    rule = mtp_rule(_config("deepseek-v3"))
    assert mtp_bytes_from_headers(rule, [header]) == 7168 * 2
    assert mtp_bytes_from_headers(None, [header]) == 0


def test_the_mtp_blocks_embedding_and_head_copies_are_told_apart(model_copy, st_file):
    """DeepSeek-V3's MTP layer (61) stores its own embed_tokens and shared_head.head; vLLM
    skips all of layer 61 without MTP, and with MTP the drafter loads them, then drops both
    copies for the target's (llm_base_proposer.py, 0.20.0 to 0.32.0)."""
    d = model_copy("deepseek-v3")
    st_file(d / "model.safetensors", {
        "model.layers.60.input_layernorm.weight": ("BF16", [32]),
        "model.layers.61.eh_proj.weight": ("BF16", [32, 64]),
        "model.layers.61.embed_tokens.weight": ("BF16", [100, 32]),
        "model.layers.61.shared_head.head.weight": ("BF16", [100, 32]),
        "model.layers.61.shared_head.norm.weight": ("BF16", [32]),
    })
    size = checkpoint_weight_size(d, _config("deepseek-v3"))
    assert size is not None
    assert size.mtp_bytes == (32 * 64 + 2 * 100 * 32 + 32) * 2
    assert size.mtp_shared_bytes == 2 * 100 * 32 * 2
    spec = load_local_model(d)
    assert (spec.mtp_weights_bytes, spec.mtp_shared_copy_bytes) == (
        size.mtp_bytes, size.mtp_shared_bytes)
    assert is_shared_copy("model.layers.61.embed_tokens.weight")
    assert not is_shared_copy("model.layers.61.shared_head.norm.weight")
