"""The RoPE cos/sin tables vLLM builds at load (kvpilot.core.models.rope_cache), from the real
config.json fixtures (tests/data/models/*/SOURCE.txt), and their place in the plan's weights."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from fitkit import MODELS, rtx4090

from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.models.local import spec_from_config
from kvpilot.core.models.rope_cache import RopeTable, rope_cache_bytes, rope_tables

MiB = 1 << 20


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


@pytest.mark.parametrize(("name", "expected"), [
    # max_position_embeddings x rotary_dim x 2 bytes, one table shared by every layer
    ("llama-3.1-8b-instruct", 131_072 * 128 * 2),  # llama3 scaling keeps the length
    ("qwen3-8b", 40_960 * 128 * 2),
    ("qwen3.5-27b", 262_144 * 64 * 2),  # partial_rotary_factor 0.25 of a 256 head
    ("glm-4.5-air", 131_072 * 64 * 2),  # partial_rotary_factor 0.5
    ("qwen2.5-vl-7b-instruct", 128_000 * 128 * 2),  # mrope: the default table
    # yarn: original_max_position_embeddings x factor; gpt-oss builds it in float32
    ("gpt-oss-20b", 4096 * 32 * 64 * 4),
    # MLA rotates qk_rope_head_dim only (deepseek_yarn: 4,096 x 40 positions)
    ("deepseek-v3", 4096 * 40 * 64 * 2),
    # longrope: the short (original 4,096) and the long (131,072) tables together, 96 wide
    ("phi-4-mini-instruct", (4096 + 131_072) * 96 * 2),
    # Gemma 3: the sliding layers' table and the global layers' linear x 8 one
    ("gemma-3-12b-it", 131_072 * 256 * 2 + 131_072 * 8 * 256 * 2),
    # Gemma 4: a 256-wide sliding table and the proportional global one as wide as its head
    ("gemma-4-e2b-it", 131_072 * 256 * 2 + 131_072 * 512 * 2),
    ("gemma-4-e4b-it", 131_072 * 256 * 2 + 131_072 * 512 * 2),
    ("gemma-4-31b-it-nvfp4", 262_144 * 256 * 2 + 262_144 * 512 * 2),
    # Llama 4 Scout: 10,485,760 positions, 2.5 GiB
    ("llama-4-scout-17b-16e-instruct", 10_485_760 * 128 * 2),
    # Nemotron-H: Mamba2 and attention layers without positions
    ("nemotron-3-nano-30b-a3b", 0),
])
def test_each_fixture_gets_the_tables_vllm_builds(name: str, expected: int) -> None:
    assert spec_from_config(_config(name), model_id=name).rope_cache_bytes == expected


def test_tables_are_counted_once_per_distinct_rope() -> None:
    text = {"rope_parameters": {"sliding_attention": {"rope_type": "default"},
                                "full_attention": {"rope_type": "proportional",
                                                   "partial_rotary_factor": 0.25}}}
    both = rope_tables(text, model_type="gemma4_text", head_dim=256, max_position=1000,
                       layer_types=("sliding_attention", "full_attention"),
                       global_head_dim=512)
    assert both == (RopeTable(1000, 256, 2), RopeTable(1000, 512, 2))
    # a model of sliding layers only builds the sliding table
    sliding = rope_tables(text, model_type="gemma4_text", head_dim=256, max_position=1000,
                          layer_types=("sliding_attention",), global_head_dim=512)
    assert rope_cache_bytes(*sliding) == 1000 * 256 * 2
    # NoPE (Granite 4 hybrids) and linear-attention-only stacks build none
    assert rope_tables({"position_embedding_type": "nope"}, model_type="granitemoehybrid",
                       head_dim=128, max_position=1000) == ()
    assert rope_tables({}, model_type="x", head_dim=128, max_position=1000,
                       layer_types=("linear_attention",)) == ()
    # dynamic and linear scaling lengthen the table by the factor
    dyn = rope_tables({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, model_type="llama",
                      head_dim=128, max_position=4096)
    assert dyn == (RopeTable(8192, 128, 2),)


def test_a_plan_counts_the_tables_with_the_weights() -> None:
    spec = spec_from_config(_config("gemma-4-e4b-it"), model_id="google/gemma-4-E4B-it")
    with_tables = compute_capacity(rtx4090(spec, max_model_len=8192, vllm_version="0.21.0"))
    without = compute_capacity(rtx4090(replace(spec, rope_cache_bytes=0), max_model_len=8192,
                                       vllm_version="0.21.0"))
    weights = {t.name: t for t in with_tables.terms}["weights"]
    assert weights.bytes - {t.name: t for t in without.terms}["weights"].bytes == 192 * MiB
    assert "192 MiB of RoPE cos/sin tables" in weights.note
    assert without.available_kv_bytes - with_tables.available_kv_bytes == 192 * MiB
