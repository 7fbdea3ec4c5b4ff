"""Hybrid linear-attention models: the state page, vLLM's block alignment, the block pool bound
on --max-num-seqs (vLLM 0.20+), its classification from vLLM's message and its fallbacks.

The hybrid model here is the Qwen3-8B fixture with every fourth layer kept as attention and
the others given a Gated DeltaNet state of 16 key / 32 value heads of 128 (a synthetic
arrangement for the arithmetic, not a published checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    GATED_DELTA_NET,
    LINEAR_ATTENTION,
    LinearState,
    ModelSpec,
)
from kvpilot.core.fit import fallback, kv, linear_state
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.vllm.logparse import LogScanner

GDN = LinearState(GATED_DELTA_NET, conv_dim=2 * 16 * 128 + 32 * 128, conv_kernel=4,
                  temporal_heads=32, temporal_head_dim=128, temporal_state_dim=128,
                  ssm_dtype="float32")
#: conv 8,192 channels x 3 steps x 2 bytes + SSM 32 x 128 x 128 x 4 bytes
GDN_STATE_BYTES = 8192 * 3 * 2 + 32 * 128 * 128 * 4

#: vLLM 0.20.0 / 0.21.0 config/compilation.py format string, filled in
MAMBA_LINE = (
    "(EngineCore pid=311) ERROR 12-03 09:14:02 [core.py:1584] ValueError: max_num_seqs (256) "
    "exceeds available Mamba cache blocks (143). Each decode sequence requires one Mamba cache "
    "block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 143 or "
    "increase gpu_memory_utilization."
)


@pytest.fixture
def hybrid() -> ModelSpec:
    base = fixture_spec("qwen3-8b", 16_400_000_000)
    kinds = tuple(FULL_ATTENTION if (i + 1) % 4 == 0 else LINEAR_ATTENTION
                  for i in range(base.num_hidden_layers))
    return replace(base, layer_types=kinds, linear_state=GDN)


def test_state_page_is_conv_plus_fp32_ssm_state() -> None:
    assert GDN.page_bytes(2, 4) == GDN_STATE_BYTES == 2_146_304
    # tensor parallel splits the channels and the heads
    assert GDN.page_bytes(2, 4, tp=2) == GDN_STATE_BYTES // 2


def test_attention_block_grows_until_one_page_holds_a_state(hybrid: ModelSpec) -> None:
    layout = kv.kv_layout(hybrid)
    per_token = 2 * 8 * 128 * 2  # one attention layer's K+V per token
    # vLLM's _align_hybrid_block_size: 16 x ceil(state / (16 x per_token))
    assert layout.block_size == 16 * math.ceil(GDN_STATE_BYTES / (16 * per_token)) == 528
    assert layout.page_bytes == 528 * per_token  # the state page is padded to it
    # fp8 KV halves the token's bytes: twice the tokens per block
    assert kv.kv_layout(hybrid, "fp8").block_size == 1056
    # 27 linear + 9 attention layers: groups of 9, one attention and three state groups
    assert layout.group_size == 9
    assert [g.kind for g in layout.groups] == [FULL_ATTENTION] + [LINEAR_ATTENTION] * 3
    assert layout.kv_bytes_per_token == 9 * per_token
    assert layout.state_bytes_per_sequence == 27 * GDN_STATE_BYTES
    # a 16,384-token request: its attention blocks plus one state block per state group
    assert layout.blocks_per_request(16_384, 2048) == math.ceil(16_384 / 528) + 3
    # with prefix caching vLLM keeps two state blocks per group ('align' mode)
    cached = kv.kv_layout(hybrid, prefix_caching=True)
    assert cached.blocks_per_request(16_384, 2048) == math.ceil(16_384 / 528) + 6


def test_more_sequences_than_blocks_is_predicted_from_vllm_020(hybrid: ModelSpec) -> None:
    inputs = rtx4090(hybrid, max_model_len=8192, max_num_seqs=512, vllm_version="0.21.0")
    cap = compute_capacity(inputs)
    assert 0 < cap.num_blocks < 512
    assert cap.failure is not None and cap.failure.kind == failures.MAMBA_CACHE_BLOCKS
    assert cap.failure.details["num_blocks"] == cap.num_blocks
    assert cap.verdict == "does_not_fit"
    # the check is absent from 0.19 and skipped without FULL decode graphs
    assert compute_capacity(replace(inputs, vllm_version="0.19.0")).failure is None
    assert compute_capacity(replace(inputs, enforce_eager=True)).failure is None
    assert compute_capacity(replace(inputs, cudagraph_mode="PIECEWISE")).failure is None
    # as many sequences as blocks starts
    fewer = compute_capacity(replace(inputs, max_num_seqs=cap.num_blocks // 2))
    assert fewer.failure is None


def test_vllms_message_is_classified_with_its_figures() -> None:
    scanner = LogScanner(version="0.21.0")
    scanner.feed(MAMBA_LINE)
    failure = scanner.failure
    assert failure is not None
    assert failure.kind == failures.MAMBA_CACHE_BLOCKS
    assert failure.details == {"max_num_seqs": 256, "num_blocks": 143}
    assert "143 sequences" in failure.message


def test_fewer_sequences_fallback_takes_the_logged_blocks(hybrid: ModelSpec) -> None:
    scanner = LogScanner(version="0.21.0")
    scanner.feed(MAMBA_LINE)
    assert scanner.failure is not None
    inputs = rtx4090(hybrid, max_model_len=8192, max_num_seqs=256, vllm_version="0.21.0")
    options = fallback.propose(scanner.failure, inputs)
    kinds = [o.kind for o in options]
    assert linear_state.FEWER_SEQUENCES in kinds
    first = next(o for o in options if o.kind == linear_state.FEWER_SEQUENCES)
    assert first.inputs.max_num_seqs == 143
    assert first.capacity.failure is None or (
        first.capacity.failure.kind != failures.MAMBA_CACHE_BLOCKS)
    piecewise = next(o for o in options if o.kind == linear_state.PIECEWISE_GRAPHS)
    assert piecewise.inputs.cudagraph_mode == "PIECEWISE"
    assert piecewise.capacity.failure is None
    # every option says what it predicts
    assert all("—" in o.label for o in options)
