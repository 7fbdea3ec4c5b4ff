"""KV bytes per token, page sizes, hybrid groups, capacity and vLLM's length estimate."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fitkit import fixture_spec

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.model_spec import MLA
from kvpilot.core.fit import kv


def test_qwen25_7b_is_57344_bytes_per_token_in_bf16(qwen7b):
    layout = kv.kv_layout(qwen7b)
    # 2 (K,V) x 28 layers x 4 KV heads x 128 head_dim x 2 bytes
    assert layout.kv_bytes_per_token == 57_344
    assert layout.page_bytes == 2 * 4 * 128 * 2 * 16
    assert layout.group_size == 28


def test_llama31_8b_is_128_kib_per_token_and_fp8_halves_it(llama8b):
    assert kv.kv_layout(llama8b).kv_bytes_per_token == 131_072
    assert kv.kv_layout(llama8b, "fp8").kv_bytes_per_token == 65_536
    assert kv.kv_layout(llama8b, "fp8_e5m2").kv_bytes_per_token == 65_536


def test_tensor_parallel_splits_kv_heads_and_replicates_below_one_head(qwen7b):
    assert kv.kv_layout(qwen7b, tensor_parallel_size=2).kv_bytes_per_token == 28_672
    # 4 KV heads on 8 ranks: each rank still holds one head
    assert kv.kv_heads_per_rank(qwen7b, 8) == 1


def test_mla_stores_one_latent_without_v():
    ds = fixture_spec("deepseek-v2-lite")
    assert ds.mla is not None
    per_layer = kv.bytes_per_token_per_layer(ds)
    assert per_layer == (ds.mla.kv_lora_rank + ds.mla.qk_rope_head_dim) * 2
    fake = replace(ds, mla=MLA(kv_lora_rank=512, qk_rope_head_dim=64))
    assert kv.bytes_per_token_per_layer(fake, "fp8") == 576


def test_gpt_oss_forms_two_groups_of_twelve(gptoss):
    layout = kv.kv_layout(gptoss)
    assert layout.group_size == 12
    assert [g.kind for g in layout.groups] == ["full_attention", "sliding_attention"]
    assert layout.is_hybrid
    # a 16,384-token request: 1,024 full blocks + sliding cdiv(128-1+2048, 16)+1 = 137
    assert layout.blocks_per_request(16_384, 2048) == 1024 + 137


def test_old_token_formula_reproduces_a_logged_gpt_oss_capacity(gptoss):
    # vLLM 0.10.1.1 on 4x A100 logged 330,018 blocks, 2,640,144 tokens, 284.25x at 16,384
    layout = kv.kv_layout(gptoss)
    available = 330_018 * layout.bytes_per_block
    cap = kv.kv_capacity(layout, available, 16_384, 2048, tokens_from_concurrency=False)
    assert cap.num_blocks == 330_018
    assert cap.kv_cache_tokens == 2_640_144
    assert cap.max_concurrency == pytest.approx(284.25, abs=0.005)


def test_gemma3_groups_five_sliding_per_full_layer():
    gemma = fixture_spec("gemma-3-12b-it")
    layout = kv.kv_layout(gemma)
    kinds = [g.kind for g in layout.groups]
    assert kinds.count("full_attention") == 1
    assert kinds.count("sliding_attention") == 5
    # the sliding groups cap a long request near the window
    long_blocks = layout.blocks_per_request(131_072, 2048)
    assert long_blocks < 2 * (131_072 // 16)


def test_full_attention_capacity_matches_a_logged_qwen2_run(qwen7b):
    # vLLM 0.10.1.1: 29,053 blocks of 16 -> 464,848 tokens, 28.37x at 16,384
    layout = kv.kv_layout(qwen7b)
    cap = kv.kv_capacity(layout, 29_053 * layout.bytes_per_block, 16_384, 2048)
    assert cap.kv_cache_tokens == 464_848
    assert round(cap.max_concurrency, 2) == 28.37


def test_estimated_max_model_len_keeps_the_null_block_aside(qwen7b):
    layout = kv.kv_layout(qwen7b, block_size=128)
    # 256 blocks of 128 tokens: vLLM 0.32 estimates (256 - 1) x 128 = 32,640
    assert kv.estimate_max_model_len(layout, 256, 64_000, 2048) == 32_640
    assert kv.estimate_max_model_len(layout, 256, 64_000, 2048, reserve_null_block=False) == 32_768
    assert kv.estimate_max_model_len(layout, 1, 64_000, 2048) == 0


def test_unknown_dtype_is_a_clear_error(qwen7b):
    with pytest.raises(FitError, match="unknown dtype 'int3'"):
        kv.kv_layout(qwen7b, "int3")


def test_group_padding_follows_the_release(gptoss):
    # 12 sliding + 13 full (a drafter's extra layer): padded to groups of 13 from 0.13
    # (under 1.25 x), split into groups of 12 before
    kinds = (*gptoss.resolved_layer_types, "full_attention")
    model = replace(gptoss, layer_types=kinds, num_hidden_layers=len(kinds))
    assert kv.kv_layout(model, vllm_version="0.10.2").group_size == 12
    assert kv.kv_layout(model, vllm_version="0.16.0").group_size == 13
    assert kv.kv_layout(model, vllm_version="0.21.0").group_size == 13
    # 8 full + 11 sliding: only the 1.5 rule of 0.19+ pads
    kinds = ("full_attention",) * 8 + ("sliding_attention",) * 11
    model = replace(gptoss, layer_types=kinds, num_hidden_layers=len(kinds))
    assert kv.kv_layout(model, vllm_version="0.16.0").group_size == 8
    assert kv.kv_layout(model, vllm_version="0.19.0").group_size == 11
