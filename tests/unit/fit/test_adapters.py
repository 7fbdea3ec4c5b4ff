"""The budget hooks of the pooling runner, LoRA and drafters (kvpilot.core.fit.adapters)."""

from __future__ import annotations

import json

import pytest
from fitkit import rtx4090

from kvpilot.core.base.errors import FitError
from kvpilot.core.fit import activation, adapters
from kvpilot.core.fit.budget import compute_capacity


def test_pooling_runs_no_sampler(qwen7b):
    # eager: a first compile's copy of the embedding table would set both peaks
    generate = compute_capacity(rtx4090(qwen7b, max_model_len=8192, vllm_version="0.20.0",
                                        enforce_eager=True))
    pooling = compute_capacity(rtx4090(qwen7b, max_model_len=8192, vllm_version="0.20.0",
                                       runner="pooling", enforce_eager=True))
    profile = activation.profile_for("0.20.0", (8, 9))
    batched = generate.max_num_batched_tokens
    forward = activation.forward_peak_bytes(qwen7b, batched, 1, 2)
    hidden = batched * qwen7b.hidden_size * 2
    remainder = activation.FITTED.row_remainder_bytes.get(profile.key, 0)
    # _dummy_pooler_run instead of _dummy_sampler_run: the forward (or the hidden states) alone
    assert pooling.activation_peak_bytes == max(0, max(forward, hidden) + remainder)
    assert pooling.activation_peak_bytes < generate.activation_peak_bytes
    assert pooling.kv_bytes_per_token == generate.kv_bytes_per_token
    assert pooling.inputs["runner"] == "pooling"


def test_an_unknown_runner_is_refused(qwen7b):
    with pytest.raises(FitError, match="--runner"):
        compute_capacity(rtx4090(qwen7b, runner="embed"))


def test_plan_layout_adds_the_drafters_pages(qwen7b):
    inputs = rtx4090(qwen7b, speculative_config=json.dumps({"method": "ngram",
                                                            "num_speculative_tokens": 2}))
    assert adapters.plan_layout(inputs, qwen7b, None).draft_bytes_per_block == 0
