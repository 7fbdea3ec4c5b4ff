"""Speculative decoding in the plan: ``--speculative-config`` read as vLLM reads it, and what a
drafter adds (weights, KV layers, the rejection sampler's rows, larger CUDA-graph captures)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import VERDICT_BORDERLINE, VERDICT_DOES_NOT_FIT
from kvpilot.core.base.speculative_config import parse_speculative_config
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import adapters, speculative
from kvpilot.core.fit.budget import compute_capacity, estimate_weights_bytes


def _config(**values: object) -> str:
    return json.dumps(values)


@pytest.mark.parametrize(("values", "method"), [
    ({"model": "[ngram]", "num_speculative_tokens": 3}, "ngram"),
    ({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 2}, "eagle"),
    ({"model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}, "eagle3"),
    ({"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 4}, "draft_model"),
    ({"method": "deepseek_mtp", "num_speculative_tokens": 1}, "mtp"),
    ({"method": "mtp"}, "mtp"),
])
def test_the_method_is_inferred_as_vllm_does(values, method):
    assert parse_speculative_config(_config(**values)).method == method


@pytest.mark.parametrize(("text", "says"), [
    ("{not json", "not JSON"),
    ("[1]", "JSON object"),
    (_config(num_speculative_tokens=2), "neither"),
    (_config(method="eagle3", num_speculative_tokens=2), "needs the draft"),
    (_config(method="ngram"), "num_speculative_tokens"),
    (_config(method="ngram", num_speculative_tokens=0), "at least 1"),
])
def test_bad_configs_say_what_to_give(text, says):
    with pytest.raises(FitError, match=says):
        parse_speculative_config(text)


def test_mtp_on_a_model_without_mtp_layers_does_not_fit(qwen7b):
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=8192,
                                   speculative_config=_config(method="mtp")))
    assert cap.failure is not None and cap.failure.kind == failures.UNSUPPORTED_MODEL
    assert "no MTP layers" in cap.failure.message
    assert cap.verdict == VERDICT_DOES_NOT_FIT


def test_a_draft_models_layers_join_the_kv_cache():
    target = fixture_spec("qwen3-30b-a3b", None)
    draft = fixture_spec("qwen3-8b", None)
    spec = _config(model="Qwen/Qwen3-8B", num_speculative_tokens=3)
    plain = compute_capacity(rtx4090(target, max_model_len=4096, gpu_total_bytes=80 << 30,
                                     gpu_name="NVIDIA H100 80GB HBM3"))
    with_draft = compute_capacity(rtx4090(target, max_model_len=4096, gpu_total_bytes=80 << 30,
                                          gpu_name="NVIDIA H100 80GB HBM3",
                                          speculative_config=spec, draft_model=draft))
    # Qwen3-8B: 36 layers x 8 KV heads x 128 x (K + V) x 2 bytes per token
    assert with_draft.kv_bytes_per_token - plain.kv_bytes_per_token == 36 * 8 * 128 * 2 * 2
    assert with_draft.page_bytes_per_block - plain.page_bytes_per_block == 36 * 8 * 128 * 4 * 16
    assert with_draft.weights_bytes - plain.weights_bytes == estimate_weights_bytes(draft)
    assert with_draft.inputs["speculative_method"] == "draft_model"
    assert with_draft.inputs["num_speculative_tokens"] == 3


def test_a_draft_that_cannot_be_read_keeps_the_plan_borderline(qwen7b):
    spec = _config(model="/nowhere/eagle3-head", method="eagle3", num_speculative_tokens=2)
    cap = compute_capacity(rtx4090(qwen7b, max_model_len=4096, speculative_config=spec))
    assert cap.verdict == VERDICT_BORDERLINE
    assert cap.inputs["draft_known"] is False
    assert "could not be read" in {t.name: t.note for t in cap.terms}["weights"]


def test_draft_tokens_scale_the_capture_size_from_0_20(qwen7b):
    ngram = _config(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4)
    plain = compute_capacity(rtx4090(qwen7b, max_model_len=4096, max_num_seqs=8,
                                     vllm_version="0.20.0"))
    spec = compute_capacity(rtx4090(qwen7b, max_model_len=4096, max_num_seqs=8,
                                    vllm_version="0.20.0", speculative_config=ngram))
    # min(8 x (1 + 3) x 2, 512) = 64 captured tokens instead of min(8 x 2, 512) = 16
    assert abs(spec.cudagraph_bytes - 4 * plain.cudagraph_bytes) <= 4
    # ngram loads nothing and keeps no KV of its own
    assert spec.weights_bytes == plain.weights_bytes
    assert spec.kv_bytes_per_token == plain.kv_bytes_per_token
    # the rejection sampler's 2 x max_num_seqs logit rows (eager: a first compile's copy of the
    # embedding table would set both peaks)
    eager = {"max_model_len": 4096, "max_num_seqs": 8, "vllm_version": "0.20.0",
             "enforce_eager": True}
    assert (compute_capacity(rtx4090(qwen7b, speculative_config=ngram, **eager))
            .activation_peak_bytes
            > compute_capacity(rtx4090(qwen7b, **eager)).activation_peak_bytes)


def test_before_0_20_only_the_sampler_rows_move_the_kv(qwen7b):
    ngram = _config(method="ngram", num_speculative_tokens=3, prompt_lookup_max=4)
    kw = {"max_model_len": 4096, "max_num_seqs": 8, "vllm_version": "0.19.0"}
    plain = compute_capacity(rtx4090(qwen7b, **kw))
    spec = compute_capacity(rtx4090(qwen7b, speculative_config=ngram, **kw))
    # graphs are outside the 0.19 budget; only the sampler's extra rows move the KV
    assert plain.available_kv_bytes - spec.available_kv_bytes == (
        spec.activation_peak_bytes - plain.activation_peak_bytes)


def test_mtp_layer_bytes_count_every_expert():
    moe = fixture_spec("qwen3-30b-a3b", None)
    h, q, kvd, e, i = 2048, 4096, 512, 128, 768
    params = h * (q + 2 * kvd) + q * h + e * 3 * h * i + h * e + 2 * h * h + 4 * h
    assert speculative.mtp_layer_bytes(moe) == 2 * params


def test_a_checkpoints_mtp_layer_joins_the_kv_cache_and_the_weights():
    # Qwen3.5-27B's config.json as the catalog carries it (its source is named there):
    # mtp_num_hidden_layers 1, full-attention layers of 4 KV heads x 256
    from kvpilot.core.models import catalog
    from kvpilot.core.models.local import spec_from_config

    entry = next(e for e in catalog.catalog_entries() if e.id == "Qwen/Qwen3.5-27B")
    model = spec_from_config(entry.config, model_id=entry.id)
    assert model.mtp_layers == 1
    kw = {"max_model_len": 8192, "max_num_seqs": 16, "gpu_total_bytes": 80 << 30,
          "gpu_name": "NVIDIA H100 80GB HBM3", "vllm_version": "0.20.0"}
    plain = compute_capacity(rtx4090(model, **kw))
    mtp = compute_capacity(rtx4090(model, speculative_config=_config(method="mtp"), **kw))
    assert mtp.failure is None
    assert mtp.inputs["num_speculative_tokens"] == 1  # MTP defaults to its layer count
    assert mtp.inputs["draft_kv_bytes_per_token"] == 2 * 4 * 256 * 2
    assert mtp.kv_bytes_per_token - plain.kv_bytes_per_token == 2 * 4 * 256 * 2
    assert mtp.weights_bytes - plain.weights_bytes == speculative.mtp_layer_bytes(model)
    assert mtp.available_kv_bytes < plain.available_kv_bytes


def test_mtp_weights_counted_in_the_checkpoints_files_are_the_ones_mtp_loads_back():
    """A checkpoint whose MTP tensors were counted from its files (and left out of its size,
    as vLLM skips them without MTP drafting) loads exactly those bytes back with MTP on."""
    from dataclasses import replace

    from kvpilot.core.models import catalog
    from kvpilot.core.models.local import spec_from_config

    entry = next(e for e in catalog.catalog_entries() if e.id == "Qwen/Qwen3.5-27B")
    model = spec_from_config(entry.config, model_id=entry.id)
    counted = replace(model, mtp_weights_bytes=850 << 20)
    settings = parse_speculative_config(_config(method="mtp"))
    exact = speculative.speculative_budget(counted, settings, draft=None, draft_weights_bytes=None)
    assert exact.draft_weights_bytes == 850 << 20 and "as the checkpoint stores them" in exact.note
    modelled = speculative.speculative_budget(model, settings, draft=None, draft_weights_bytes=None)
    assert modelled.draft_weights_bytes == speculative.mtp_layer_bytes(model)
    assert "16 bits" in modelled.note
    # the block's own embedding and output-head copies are dropped for the target's
    copies = replace(counted, mtp_shared_copy_bytes=300 << 20)
    kept = speculative.speculative_budget(copies, settings, draft=None, draft_weights_bytes=None)
    assert kept.draft_weights_bytes == 550 << 20


GEMMA4_MTP = _config(method="mtp", model="google/gemma-4-E4B-it-assistant",
                     num_speculative_tokens=2)


def test_a_gemma4_assistant_is_the_mtp_head_of_a_target_without_mtp_layers():
    """Gemma 4 declares no MTP layers; its MTP head is a checkpoint of its own (the assistant)
    whose layers all read the target's KV cache (vLLM 0.32.0 gemma4_mtp.py): its weights count,
    its KV pages do not, and nothing is refused."""
    target = fixture_spec("gemma-4-e4b-it", int(15 * GiB))
    assert target.mtp_layers == 0
    # an assistant spec: the architecture is what marks its layers KV-shared
    assistant = replace(fixture_spec("gemma-4-e2b-it", int(0.4 * GiB)),
                        architecture="Gemma4AssistantForCausalLM")
    base = rtx4090(target, max_model_len=8192, vllm_version="0.32.0")
    plain = compute_capacity(base)
    cap = compute_capacity(replace(base, speculative_config=GEMMA4_MTP, draft_model=assistant))
    assert cap.failure is None
    assert cap.weights_bytes - plain.weights_bytes == int(0.4 * GiB)
    assert cap.kv_bytes_per_token == plain.kv_bytes_per_token
    assert cap.inputs["draft_kv_bytes_per_token"] == 0 and cap.inputs["draft_known"]


def test_an_unread_gemma4_assistant_is_borderline_not_refused():
    target = fixture_spec("gemma-4-e4b-it", int(15 * GiB))
    cap = compute_capacity(rtx4090(target, max_model_len=8192, vllm_version="0.32.0",
                                   speculative_config=GEMMA4_MTP))
    assert cap.failure is None and cap.verdict == VERDICT_BORDERLINE
    assert cap.inputs["draft_known"] is False


def test_a_qwen35_mtp_layer_has_the_gated_query_projection():
    """Qwen3.5-27B's MTP layer (config.json: hidden 5120, 24 heads of 256, 4 KV heads,
    intermediate 17408), as qwen3_5_mtp.py builds it: qkv_proj 5120 x (2 x 6144 + 2 x 1024),
    o_proj 6144 x 5120, gate/up/down 3 x 5120 x 17408, fc 10240 x 5120 and four norms of
    5120, at 16 bits."""
    model = fixture_spec("qwen3.5-27b")
    params = (5120 * (2 * 6144 + 2 * 1024) + 6144 * 5120 + 3 * 5120 * 17408
              + 2 * 5120 * 5120 + 4 * 5120)
    assert params == 424_693_760
    assert speculative.mtp_layer_bytes(model) == 2 * params
    assert speculative.mtp_layer_bytes(model, 2) == params


@pytest.mark.parametrize(("prefix_caching", "state_blocks"), [(False, 1), (True, 2)])
def test_each_draft_token_adds_a_state_block_per_linear_group(prefix_caching, state_blocks):
    """vLLM gives every Gated DeltaNet layer ``num_speculative_blocks = num_speculative_tokens``
    (mamba/abstract.py get_kv_cache_spec, 0.20.0 to 0.32.0): a request holds 1 (2 with prefix
    caching, 'align' mode) + 2 state blocks per linear group with two MTP tokens. Qwen3.5-27B
    (48 linear layers in 3 groups of 16) at 32,768 tokens in blocks of 784: 42 attention
    blocks."""
    model = fixture_spec("qwen3.5-27b", int(16 * GiB))
    inputs = rtx4090(model, max_model_len=32768, vllm_version="0.29.0",
                     enable_prefix_caching=prefix_caching)
    plain = adapters.plan_layout(inputs, model, None)
    mtp = adapters.plan_layout(
        replace(inputs, speculative_config=_config(method="mtp", num_speculative_tokens=2)),
        model, None)
    assert (plain.block_size, len(plain.groups)) == (784, 4)
    assert plain.blocks_per_request(32768, 0) == 42 + 3 * state_blocks
    assert mtp.blocks_per_request(32768, 0) == 42 + 3 * (state_blocks + 2)
    # a dense model has no state to multiply
    dense = fixture_spec("qwen3-8b", int(15 * GiB))
    dense_inputs = rtx4090(dense, max_model_len=32768, speculative_config=_config(
        method="ngram", num_speculative_tokens=3))
    assert adapters.plan_layout(dense_inputs, dense, None).blocks_per_request(32768, 0) \
        == adapters.plan_layout(replace(dense_inputs, speculative_config=None), dense,
                                None).blocks_per_request(32768, 0)
