"""--mamba-ssm-cache-dtype and --mamba-cache-mode as vLLM 0.29.0 applies them to a hybrid's
state."""

from __future__ import annotations

from fitkit import fixture_spec

from kvpilot.core.fit import kv


def test_ssm_cache_dtype_flag_wins_over_the_checkpoints() -> None:
    qwen35 = fixture_spec("qwen3.5-27b")
    f32 = kv.state_page_bytes(qwen35)  # config.json: mamba_ssm_dtype float32
    f16 = kv.state_page_bytes(qwen35, ssm_cache_dtype="float16")
    assert kv.state_page_bytes(qwen35, ssm_cache_dtype="auto") == f32
    assert f16 < f32
    state = qwen35.linear_state
    assert state is not None
    ssm_elems = state.temporal_heads * state.temporal_head_dim * state.temporal_state_dim
    assert f32 - f16 == ssm_elems * 2


def test_mamba_cache_mode_align_keeps_two_state_blocks_not_one_per_block() -> None:
    granite = fixture_spec("granite-4.0-tiny-preview")
    default = kv.kv_layout(granite, prefix_caching=True, vllm_version="0.29.0")
    align = kv.kv_layout(granite, prefix_caching=True, vllm_version="0.29.0",
                         mamba_cache_mode="align")
    off = kv.kv_layout(granite, prefix_caching=False, vllm_version="0.29.0",
                       mamba_cache_mode="all")
    assert default.state_blocks_follow_length  # the model's own 'all' mode
    assert not align.state_blocks_follow_length and align.state_blocks_per_request == 2
    assert not off.state_blocks_follow_length and off.state_blocks_per_request == 1
