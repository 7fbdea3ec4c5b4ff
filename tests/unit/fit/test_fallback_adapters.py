"""Fallbacks for plans with LoRA slots or a drafter: fewer slots, a lower rank, speculative
decoding off, and fixes for the settings vLLM refuses; the launch policy's choice among them."""

from __future__ import annotations

import json

from fitkit import rtx4090

from kvpilot.core.app.launch import FallbackPolicy, rank_fallbacks
from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.fit import fallback, fallback_adapters
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail


def _kinds(options):
    return [o.kind for o in options]


def test_a_kv_failure_with_many_slots_offers_fewer_slots_and_a_lower_rank(llama8b):
    inputs = rtx4090(llama8b, max_model_len=32768, vllm_version="0.20.0", enable_lora=True,
                     max_loras=8, max_lora_rank=64)
    cap = compute_capacity(inputs)
    assert cap.failure is not None and cap.failure.kind == failures.KV_CACHE_TOO_SMALL
    options = fallback.propose(cap.failure, inputs)
    by_kind = {o.kind: o for o in options}
    fewer = by_kind[fallback_adapters.FEWER_LORA_SLOTS]
    assert fewer.inputs.max_loras == 4
    # the predicted effect: four slots' stacks come back to the KV cache
    gained = fewer.capacity.available_kv_bytes - cap.available_kv_bytes
    assert gained == cap.inputs["lora_slot_bytes"] // 2
    assert f"{gained / (1 << 30):+.2f} GiB KV" in fewer.label
    lower = by_kind[fallback_adapters.LOWER_LORA_RANK]
    assert lower.inputs.max_lora_rank == 32
    assert lower.capacity.inputs["lora_slot_bytes"] == cap.inputs["lora_slot_bytes"] // 2


def test_speculative_decoding_off_gives_the_drafts_memory_back(qwen7b):
    spec = json.dumps({"model": "/nowhere/draft", "method": "draft_model",
                       "num_speculative_tokens": 3})
    inputs = rtx4090(qwen7b, max_model_len=131072 // 4, vllm_version="0.20.0",
                     speculative_config=spec, enable_lora=True, max_loras=1)
    before = compute_capacity(inputs)
    oom = Failure(failures.CUDA_OOM_LOADING, "CUDA out of memory while loading the draft")
    options = fallback.propose(oom, inputs)
    off = next(o for o in options if o.kind == fallback_adapters.SPECULATIVE_OFF)
    assert off.inputs.speculative_config is None and off.inputs.draft_model is None
    assert off.capacity.inputs.get("speculative_method") is None
    # the rejection sampler's rows leave the profile run: the KV gains what they took
    assert off.capacity.available_kv_bytes - before.available_kv_bytes == (
        before.activation_peak_bytes - off.capacity.activation_peak_bytes)


def test_refused_settings_get_the_setting_vllm_accepts(llama8b):
    inputs = rtx4090(llama8b, max_model_len=4096, enable_lora=True, max_lora_rank=24)
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    (fix,) = fallback.propose(cap.failure, inputs)
    assert fix.kind == fallback_adapters.LORA_RANK_ACCEPTED
    assert fix.inputs.max_lora_rank == 16 and fix.predicted_fits
    mtp = rtx4090(llama8b, max_model_len=4096, speculative_config='{"method": "mtp"}')
    cap = compute_capacity(mtp)
    assert cap.failure is not None
    (off,) = fallback.propose(cap.failure, mtp)
    assert off.kind == fallback_adapters.SPECULATIVE_OFF and off.predicted_fits


def test_the_automatic_policy_never_lowers_the_rank_by_itself(llama8b):
    inputs = rtx4090(llama8b, max_model_len=32768, vllm_version="0.20.0", enable_lora=True,
                     max_loras=8, max_lora_rank=64)
    cap = compute_capacity(inputs)
    assert cap.failure is not None
    spec = LaunchSpec.from_plan(inputs, "/models/llama")
    choices = rank_fallbacks(cap.failure, spec, inputs)
    assert any(c.kind == fallback_adapters.LOWER_LORA_RANK for c in choices)
    only_rank = [c for c in choices if c.kind == fallback_adapters.LOWER_LORA_RANK]
    assert FallbackPolicy(automatic=True).next_choice(only_rank, 0) is None
    taken = FallbackPolicy(automatic=True).next_choice(choices, 0)
    assert taken is not None and taken.kind != fallback_adapters.LOWER_LORA_RANK
    lora_choice = next(c for c in choices if c.kind == fallback_adapters.FEWER_LORA_SLOTS)
    assert lora_choice.changes == {"max_loras": 4}
    argv = build_argv_tail(lora_choice.spec)
    assert argv[argv.index("--max-loras") + 1] == "4"
