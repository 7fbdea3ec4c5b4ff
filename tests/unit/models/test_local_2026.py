"""The 2026 architectures planned from their published config.json (tests/data/models/*/
SOURCE.txt names each copy): layers, KV bytes per token, the linear-attention state, vLLM's
hybrid block size, and the parameter count against the checkpoint's published total.

Parameter totals are the model cards' figures (rounded by their publishers to 0.1 B or to the
billion), so they are compared within 1 %: the byte model prices these parameters per
quantization method.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest
from fitkit import MODELS, rtx4090

from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    GATED_DELTA_NET,
    LINEAR_ATTENTION,
    MAMBA2,
    NO_CACHE,
    SLIDING_ATTENTION,
    ModelSpec,
)
from kvpilot.core.fit import kv
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.models.bytemodel import param_breakdown
from kvpilot.core.models.bytemodel_hybrid import hybrid_breakdown, tower_params
from kvpilot.core.models.linear_config import linear_state_from_config
from kvpilot.core.models.local import spec_from_config, text_config_of
from kvpilot.core.models.params import ParamBreakdown

FIXTURES_2026 = (
    "gemma-4-26b-a4b", "gemma-4-31b-it-nvfp4", "qwen3.5-27b", "qwen3.5-35b-a3b",
    "qwen3-vl-8b-instruct", "qwen3-vl-30b-a3b-instruct", "nemotron-3-nano-30b-a3b",
    "llama-4-scout-17b-16e-instruct", "deepseek-v3", "gpt-oss-20b", "qwen3-next-80b-a3b-thinking",
    "qwen3.6-35b-a3b", "glm-4.7-fp8", "glm-4.7-flash", "glm-4.5-air", "qwen3.6-27b-nvfp4",
    "granite-4-8b-dense", "granite-4.0-tiny-preview",
)


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


def _spec(name: str) -> ModelSpec:
    return spec_from_config(_config(name), model_id=name)


def _params_b(name: str) -> float:
    spec = _spec(name)
    return param_breakdown(spec, text_config_of(_config(name))).total_params / 1e9


@pytest.mark.parametrize("name", FIXTURES_2026)
def test_every_fixture_is_a_known_architecture_with_a_source(name: str) -> None:
    spec = _spec(name)
    assert spec.architecture_known
    assert (MODELS / name / "SOURCE.txt").is_file() or name in (
        "qwen3-vl-30b-a3b-instruct", "gpt-oss-20b")  # fixtures of earlier releases
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token > 0
    cap = compute_capacity(rtx4090(spec, max_model_len=4096, vllm_version="0.21.0"))
    assert cap.verdict in ("fits", "borderline", "does_not_fit")


def test_gemma4_26b_moe_global_layers_and_k_eq_v() -> None:
    spec = _spec("gemma-4-26b-a4b")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (128, 8)  # top_k_experts
    assert spec.layer_types.count(FULL_ATTENTION) == 5
    assert spec.layer_types.count(SLIDING_ATTENTION) == 25
    assert (spec.global_head_dim, spec.global_kv_heads) == (512, 2)
    layout = kv.kv_layout(spec)
    # 25 sliding x 2 x 8 x 256 x 2 + 5 full x 2 x 2 x 512 x 2
    assert layout.kv_bytes_per_token == 25 * 8192 + 5 * 4096
    # sliding page 8 KiB/token x 16 is the larger: full-layer blocks hold 32 tokens
    assert layout.page_bytes == 8192 * 16
    full = [g for g in layout.groups if g.kind == FULL_ATTENTION]
    assert [g.block_tokens for g in full] == [32]
    assert layout.group_size == 5 and len(layout.groups) == 6
    # 25.2 B total parameters and 3.8 B active (model card) plus the vision tower
    assert _params_b("gemma-4-26b-a4b") == pytest.approx(25.2, rel=0.01)


def test_gemma4_31b_dense() -> None:
    spec = _spec("gemma-4-31b-it-nvfp4")
    assert spec.moe is None and spec.num_hidden_layers == 60
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2
    assert _params_b("gemma-4-31b-it-nvfp4") == pytest.approx(30.7, rel=0.01)


#: the Hub's .safetensors file sizes of the official BF16 Gemma 4 instruct checkpoints, in bytes
#: (a public file manifest listing each file's size; see
#: scripts/catalog_copies/google__gemma-4-E2B-it/SOURCE.txt), headers included
GEMMA4_IT_SAFETENSORS_BYTES = {
    "gemma-4-e2b-it": 10_246_621_918,
    "gemma-4-e4b-it": 15_992_595_884,
    "gemma-4-26b-a4b": 49_907_246_508 + 1_704_763_408,  # of gemma-4-26B-A4B-it, same tensors
    "gemma-4-31b-it-nvfp4": 49_784_788_364 + 12_761_549_884,  # of gemma-4-31B-it (BF16)
}


@pytest.mark.parametrize("name", sorted(GEMMA4_IT_SAFETENSORS_BYTES))
def test_gemma4_weights_from_config_alone_against_the_hubs_files(name: str, tmp_path) -> None:
    """Every Gemma 4 size from config.json alone within 3 % of the Hub's files (measured: E2B
    -0.53 %, E4B -0.35 %, 26B-A4B and 31B within 0.001 %: their headers' bytes)."""
    from kvpilot.core.models.local import load_local_model

    cfg = _config(name)
    cfg.pop("quantization_config", None)  # the NVFP4 upload's architecture, priced in BF16
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    estimate = load_local_model(tmp_path).weights_bytes
    files = GEMMA4_IT_SAFETENSORS_BYTES[name]
    assert estimate is not None and estimate == pytest.approx(files, rel=0.03)
    # never above the files (they hold the headers too), and within 0.6 %
    assert 0 < files - estimate < 0.006 * files


def test_qwen35_27b_gated_deltanet_state_and_block() -> None:
    spec = _spec("qwen3.5-27b")
    assert spec.layer_types.count(LINEAR_ATTENTION) == 48
    assert spec.layer_types.count(FULL_ATTENTION) == 16
    state = spec.linear_state
    assert state is not None and state.family == GATED_DELTA_NET
    assert state.ssm_dtype == "float32"  # mamba_ssm_dtype of the config
    # conv (2 x 16 x 128 + 48 x 128) x 3 x bf16 + SSM 48 x 128 x 128 x fp32
    per_layer = 10240 * 3 * 2 + 48 * 128 * 128 * 4
    assert kv.state_page_bytes(spec) == per_layer
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2
    assert layout.block_size == 16 * math.ceil(per_layer / (16 * 4096)) == 784
    assert layout.state_bytes_per_sequence == 48 * per_layer
    assert spec.vision is not None  # the Qwen3-VL tower vLLM's qwen3_5.py builds


def test_qwen35_35b_a3b_moe_hybrid() -> None:
    spec = _spec("qwen3.5-35b-a3b")
    assert spec.moe is not None and spec.moe.num_shared_experts == 1
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 10 * 2 * 2 * 256 * 2
    assert layout.group_size == 10 and len(layout.groups) == 4
    assert spec.vision is not None
    # "35B in total" (model card), the vision tower included
    assert _params_b("qwen3.5-35b-a3b") + spec.vision.params / 1e9 == pytest.approx(35, rel=0.01)


def test_nemotron3_nano_mamba2_hybrid() -> None:
    spec = _spec("nemotron-3-nano-30b-a3b")
    kinds = spec.layer_types
    assert (kinds.count(LINEAR_ATTENTION), kinds.count(FULL_ATTENTION), kinds.count(NO_CACHE)) \
        == (23, 6, 23)
    state = spec.linear_state
    assert state is not None and state.family == MAMBA2
    assert kv.state_page_bytes(spec) == (64 * 64 + 2 * 8 * 128) * 3 * 2 + 64 * 64 * 128 * 4
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 6 * 2 * 2 * 128 * 2
    assert layout.block_size == 16 * math.ceil(kv.state_page_bytes(spec) / (16 * 1024))
    # 31.6 B total, 3.6 B active with embeddings (model card)
    assert _params_b("nemotron-3-nano-30b-a3b") == pytest.approx(31.6, rel=0.01)


def test_granite4_dense_is_planned_as_attention_only() -> None:
    """A granitemoehybrid config whose layers are all attention: vLLM serves it as a plain
    attention model (0.26 config/model.py ``is_hybrid``: "granite-4.0-micro case"), so no Mamba
    state and no hybrid block size, though the config carries Mamba2 fields."""
    cfg = _config("granite-4-8b-dense")
    assert cfg["model_type"] == "granitemoehybrid" and cfg["mamba_n_heads"] == 128
    spec = _spec("granite-4-8b-dense")
    assert spec.linear_state is None and spec.moe is None
    layout = kv.kv_layout(spec)
    assert layout.block_size == 16
    assert layout.kv_bytes_per_token == 40 * 2 * 8 * 128 * 2
    # tied 100,352 x 4,096 embeddings; per layer q/o 4,096^2, k/v 4,096 x 1,024, the shared
    # MLP's input_linear 4,096 x 2 x 12,800 and output_linear 12,800 x 4,096, two norms
    h, inter, kv_dim = 4096, 12800, 8 * 128
    per_layer = 2 * h * h + 2 * h * kv_dim + 2 * h * inter + inter * h + 2 * h
    assert param_breakdown(spec, text_config_of(cfg)).total_params == (
        100352 * h + 40 * per_layer + h)
    assert spec.rope_cache_bytes == 131072 * 128 * 2  # rope, not NoPE like the hybrids


def test_granite4_tiny_preview_mamba2_hybrid_moe() -> None:
    """36 Mamba2 layers and 4 NoPE attention layers, each followed by 62 experts (6 per token)
    and a shared MLP: the attention block grows until its page holds one Mamba state."""
    spec = _spec("granite-4.0-tiny-preview")
    kinds = spec.layer_types
    assert [i for i, k in enumerate(kinds) if k == FULL_ATTENTION] == [5, 15, 25, 35]
    assert kinds.count(LINEAR_ATTENTION) == 36
    state = spec.linear_state
    assert state is not None and state.family == MAMBA2
    # conv over 48 x 64 + 2 x 1 x 128 channels (3 steps) and the 48 x 64 x 128 SSM state, bf16
    assert kv.state_page_bytes(spec) == (48 * 64 + 2 * 128) * 3 * 2 + 48 * 64 * 128 * 2
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 4 * 2 * 4 * 128 * 2
    per_layer_token = 2 * 4 * 128 * 2
    assert layout.block_size == 16 * math.ceil(kv.state_page_bytes(spec) / (16 * per_layer_token))
    assert spec.rope_cache_bytes == 0  # NoPE
    breakdown = param_breakdown(spec, text_config_of(_config("granite-4.0-tiny-preview")))
    # IBM: about 7 B in all, 1 B per token (the count of the shapes: 6.67 B and 1.39 B)
    assert breakdown.total_params == pytest.approx(6.67e9, rel=0.001)
    assert breakdown.active_params(6 / 62) == pytest.approx(1.387e9, rel=0.001)


def test_llama4_scout_chunked_local_attention() -> None:
    spec = _spec("llama-4-scout-17b-16e-instruct")
    assert spec.sliding_window == 8192
    assert spec.layer_types.count(FULL_ATTENTION) == 12  # every fourth layer is NoPE / global
    layout = kv.kv_layout(spec)
    assert layout.kv_bytes_per_token == 48 * 2 * 8 * 128 * 2
    # 109 B total of which the vision tower is outside this config copy
    assert 105 < _params_b("llama-4-scout-17b-16e-instruct") < 109


def test_deepseek_v3_mla_and_experts() -> None:
    spec = _spec("deepseek-v3")
    assert spec.mla is not None
    assert kv.kv_layout(spec).kv_bytes_per_token == 61 * (512 + 64) * 2
    assert _params_b("deepseek-v3") == pytest.approx(671, rel=0.005)


def test_qwen3_vl_8b_dense_vision() -> None:
    spec = _spec("qwen3-vl-8b-instruct")
    assert spec.vision is not None
    assert kv.kv_layout(spec).kv_bytes_per_token == 36 * 2 * 8 * 128 * 2


def test_qwen3_next_layers_follow_the_full_attention_interval() -> None:
    spec = _spec("qwen3-next-80b-a3b-thinking")
    assert spec.layer_types.count(FULL_ATTENTION) == 12
    assert spec.layer_types.count(LINEAR_ATTENTION) == 36
    state = spec.linear_state
    assert state is not None and state.ssm_dtype is None  # no mamba_ssm_dtype: model dtype
    assert kv.state_page_bytes(spec) == 8192 * 3 * 2 + 32 * 128 * 128 * 2
    assert spec.moe is not None and spec.moe.num_experts == 512
    # 80 B total (model card)
    assert _params_b("qwen3-next-80b-a3b-thinking") == pytest.approx(80, rel=0.02)


def test_qwen36_is_the_qwen35_moe_hybrid() -> None:
    a, b = _spec("qwen3.6-35b-a3b"), _spec("qwen3.5-35b-a3b")
    assert a.architecture == b.architecture
    assert kv.kv_layout(a).block_size == kv.kv_layout(b).block_size
    assert kv.state_page_bytes(a) == kv.state_page_bytes(b)


def test_nemotron_prefix_caching_uses_vllms_all_mode() -> None:
    spec = _spec("nemotron-3-nano-30b-a3b")
    state = kv.state_page_bytes(spec)
    plain = kv.kv_layout(spec)
    cached = kv.kv_layout(spec, prefix_caching=True, vllm_version="0.21.0")
    # 'all' mode: the block is a multiple of the Mamba chunk (chunk_size 128 in the config)
    assert cached.block_size == 128 * math.ceil(math.ceil(state / 1024) / 128) == 2176
    # and a sequence holds a state block per attention block of its context, per state group
    per_len = math.ceil(16_384 / cached.block_size)
    assert cached.blocks_per_request(16_384, 2048) == per_len + 4 * per_len
    assert plain.blocks_per_request(16_384, 2048) == math.ceil(16_384 / plain.block_size) + 4
    # 0.33 keeps only 'align': two state blocks per group, no chunk alignment
    newest = kv.kv_layout(spec, prefix_caching=True, vllm_version="0.33.0")
    assert newest.block_size == plain.block_size
    assert newest.blocks_per_request(16_384, 2048) == math.ceil(16_384 / plain.block_size) + 8


def test_glm4_moe_and_its_mla_lite_sibling() -> None:
    # GLM-4.7 has the architecture of GLM-4.5 / 4.6 (Glm4MoeForCausalLM); this copy of its
    # config.json leaves out quantization_config, so only the shape is checked
    glm = _spec("glm-4.7-fp8")
    assert glm.moe is not None and glm.moe.num_experts == 160
    assert kv.kv_layout(glm).kv_bytes_per_token == 92 * 2 * 8 * 128 * 2
    flash = _spec("glm-4.7-flash")
    assert flash.architecture_known and flash.mla is not None
    assert kv.kv_layout(flash).kv_bytes_per_token == 47 * (512 + 64) * 2


def test_glm45_air_moe_with_one_dense_layer_and_its_mtp_layer_left_out() -> None:
    spec = _spec("glm-4.5-air")
    assert spec.architecture == "Glm4MoeForCausalLM" and spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (128, 8)
    assert spec.moe.num_shared_experts == 1
    # 46 decoder layers own a cache; the checkpoint's 47th (num_nextn_predict_layers, MTP) is
    # loaded only as a speculative draft
    assert spec.num_hidden_layers == 46
    assert kv.kv_layout(spec).kv_bytes_per_token == 46 * 2 * 8 * 128 * 2
    breakdown = param_breakdown(spec, text_config_of(_config("glm-4.5-air")))
    # the model card: 106 B parameters, 12 B active (embeddings aside: 1.24 B)
    assert breakdown.total_params / 1e9 == pytest.approx(106, rel=0.01)
    active = breakdown.active_params(8 / 128) - breakdown.embedding_params \
        - breakdown.lm_head_params
    assert active / 1e9 == pytest.approx(12, rel=0.02)
    cap = compute_capacity(rtx4090(spec, max_model_len=8192, vllm_version="0.21.0"))
    assert cap.verdict == "does_not_fit"  # 200 GiB of BF16 weights on a 24 GiB card


def test_logged_token_count_follows_the_release_for_hybrid_models() -> None:
    spec = _spec("nemotron-3-nano-30b-a3b")
    inputs = rtx4090(spec, gpu_total_bytes=80 << 30, max_model_len=32_768, max_num_seqs=64,
                     vllm_version="0.20.0")
    old = compute_capacity(inputs)
    layout = kv.kv_layout(spec)
    # 0.20.0 prints num_blocks // groups x the attention block
    assert old.kv_cache_tokens == old.num_blocks // len(layout.groups) * layout.block_size
    new = compute_capacity(replace(inputs, vllm_version="0.21.0"))
    # 0.21.0 prints int(concurrency x max_model_len)
    assert new.kv_cache_tokens == int(new.max_concurrency * 32_768)


def test_qwen35_27b_default_sequences_exceed_the_state_blocks_on_a_96gb_card() -> None:
    from kvpilot.core.base import failures
    from kvpilot.core.fit import fallback, linear_state

    spec = _spec("qwen3.5-27b")
    inputs = rtx4090(spec, gpu_total_bytes=97_887 << 20, max_model_len=32_768,
                     vllm_version="0.21.0")
    cap = compute_capacity(inputs)
    assert cap.max_num_seqs > cap.num_blocks  # vLLM's default sequences for a 96 GB card
    assert cap.failure is not None and cap.failure.kind == failures.MAMBA_CACHE_BLOCKS
    options = fallback.propose(cap.failure, inputs)
    fewer = next(o for o in options if o.kind == linear_state.FEWER_SEQUENCES)
    # a predicted failure: as many sequences as the band's low edge has blocks
    assert fewer.inputs.max_num_seqs == cap.available_kv_band_bytes[0] // cap.page_bytes_per_block
    assert fewer.capacity.failure is None and fewer.predicted_fits
    assert options[0] is fewer  # the smallest change that is predicted to start
    # the same plan on 0.19 (no such check) starts
    assert compute_capacity(replace(inputs, vllm_version="0.19.0")).failure is None


def test_the_2026_rules_and_the_towers_they_leave_to_vision() -> None:
    spec = _spec("gemma-4-26b-a4b")
    split = hybrid_breakdown(spec, text_config_of(_config("gemma-4-26b-a4b")))
    assert isinstance(split, ParamBreakdown)
    # experts are the quantizable bulk of a MoE checkpoint; embeddings stay 16-bit
    expert = sum(x.in_features * x.out_features * x.count for x in split.linears if x.is_expert)
    assert expert > 0.8 * split.linear_params
    assert split.embedding_params == 262_144 * 2816 and split.lm_head_params == 0  # tied
    # Gemma 4's vision tower is a VisionSpec (its profile run); its config-sized parameters
    assert spec.vision is not None and spec.vision.family == "gemma4"
    assert spec.vision.params == tower_params(_config("gemma-4-26b-a4b"))  # no audio tower
    assert 0.4e9 < spec.vision.params < 0.7e9 and spec.tower_weights_bytes == 0
    # the generic rules keep older architectures
    assert hybrid_breakdown(_spec("gpt-oss-20b"), text_config_of(_config("gpt-oss-20b"))) is None
    # the state is read the same way through the config reader
    qwen = _spec("qwen3.5-27b")
    assert linear_state_from_config(
        text_config_of(_config("qwen3.5-27b")), qwen.model_type, qwen.layer_types, "x"
    ) == qwen.linear_state
