"""config.json keys of the 2026 architectures, read the way vLLM's model files read them.

Where no published config.json of a checkpoint is in tests/data/models, the configs here are
small synthetic ones built from a real fixture (its keys renamed or extended): they exercise
the parser's rules, not any checkpoint's figures.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fitkit import MODELS

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MAMBA2,
    NO_CACHE,
    SLIDING_ATTENTION,
)
from kvpilot.core.fit import kv
from kvpilot.core.models.local import spec_from_config


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


def test_top_k_experts_is_the_expert_count_per_token() -> None:
    config = _fixture("qwen3-30b-a3b")
    per_tok = config.pop("num_experts_per_tok")
    config["top_k_experts"] = per_tok  # Gemma 4's spelling of the same field
    spec = spec_from_config(config, model_id="renamed")
    assert spec.moe is not None and spec.moe.num_experts_per_tok == per_tok


def test_hybrid_override_pattern_gives_state_attention_and_mlp_only_layers() -> None:
    config = _fixture("qwen3-8b")
    pattern = "M-M*" * 9  # 36 layers: 18 Mamba, 9 attention, 9 MLP-only
    config.update({
        "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
        "hybrid_override_pattern": pattern, "mamba_num_heads": 64, "mamba_head_dim": 64,
        "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
    })
    spec = spec_from_config(config, model_id="pattern")
    assert spec.architecture_known
    assert spec.layer_types.count(LINEAR_ATTENTION) == 18
    assert spec.layer_types.count(FULL_ATTENTION) == 9
    assert spec.layer_types.count(NO_CACHE) == 9
    state = spec.linear_state
    assert state is not None and state.family == MAMBA2
    assert state.conv_dim == 64 * 64 + 2 * 8 * 128
    assert state.ssm_dtype == "float32"  # vLLM's NemotronH default for the SSM cache
    # conv (4096 + 2048) x 3 x bf16 + SSM 64 x 64 x 128 x fp32
    assert kv.state_page_bytes(spec) == 6144 * 3 * 2 + 64 * 64 * 128 * 4
    layout = kv.kv_layout(spec)
    # MLP-only layers own no cache: 9 attention layers, 18 state layers, groups of 9
    assert layout.group_size == 9
    assert [g.kind for g in layout.groups] == [FULL_ATTENTION, LINEAR_ATTENTION, LINEAR_ATTENTION]

    config["hybrid_override_pattern"] = "MX" * 18
    with pytest.raises(ModelSpecError, match="unknown layer letters"):
        spec_from_config(config, model_id="bad")


def test_gemma4_style_global_layers_and_kv_sharing() -> None:
    config = _fixture("gemma-3-12b-it")
    text = config["text_config"]
    n = text["num_hidden_layers"]
    text.update({
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                        for i in range(n)],
        "global_head_dim": 512, "num_global_key_value_heads": 2, "attention_k_eq_v": True,
        "num_kv_shared_layers": 12,
    })
    config["architectures"] = ["Gemma4ForConditionalGeneration"]
    spec = spec_from_config(config, model_id="g4")
    assert spec.global_head_dim == 512 and spec.global_kv_heads == 2
    layout = kv.kv_layout(spec)
    owning = n - 12
    sliding_tok = 2 * spec.num_key_value_heads * spec.head_dim * 2
    full_tok = 2 * 2 * 512 * 2
    full_layers = sum(1 for i in range(owning) if (i + 1) % 6 == 0)
    assert layout.kv_bytes_per_token == (
        full_layers * full_tok + (owning - full_layers) * sliding_tok)
    # pages unified to the larger page; the other kind's blocks hold proportionally more tokens
    assert layout.page_bytes == max(full_tok, sliding_tok) * 16
    smaller = [g for g in layout.groups if g.block_tokens]
    assert smaller and all(g.block_tokens == 16 * layout.page_bytes // (
        min(full_tok, sliding_tok) * 16) for g in smaller)


def test_llama4_chunked_layers_plan_as_one_chunk_windows() -> None:
    config = _fixture("llama-3.1-8b-instruct")
    n = config["num_hidden_layers"]
    config.update({
        "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
        "attention_chunk_size": 8192,
        "no_rope_layers": [0 if (i + 1) % 4 == 0 else 1 for i in range(n)],
    })
    spec = spec_from_config(config, model_id="l4")
    assert spec.sliding_window == 8192
    assert spec.layer_types.count(FULL_ATTENTION) == n // 4
    assert spec.layer_types.count(SLIDING_ATTENTION) == n - n // 4
