"""The bundled catalog: coverage, sources, sizes against the byte model, lookups."""

from __future__ import annotations

import dataclasses

import pytest

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    SOURCE_CATALOG,
    SOURCE_ESTIMATE,
)
from kvpilot.core.models import catalog
from kvpilot.core.models.bytemodel import estimate_weight_bytes
from kvpilot.core.models.local import text_config_of

ENTRIES = catalog.catalog_entries()


def test_at_least_30_entries_with_sources():
    assert len(ENTRIES) >= 30
    for e in ENTRIES:
        assert e.sources, e.id
        assert e.verification, e.id
        assert e.checkpoints and e.base_checkpoint.repo == e.id
        for c in e.checkpoints:
            assert c.sources, c.repo
            assert c.weights_source in ("catalog", "estimate")
            if not c.verified:
                assert c.note, f"{c.repo}: unverified values need a note"


def test_required_families_present():
    ids = {e.id for e in ENTRIES}
    for needed in (
        "Qwen/Qwen2.5-0.5B-Instruct",
        "Qwen/Qwen2.5-32B-Instruct",
        "Qwen/Qwen3-0.6B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-30B-A3B",
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        "meta-llama/Llama-3.2-3B-Instruct",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "mistralai/Mistral-Nemo-Instruct-2407",
        "mistralai/Mistral-Small-24B-Instruct-2501",
        "google/gemma-2-9b-it",
        "google/gemma-2-27b-it",
        "google/gemma-3-4b-it",
        "google/gemma-3-12b-it",
        "google/gemma-3-27b-it",
        "microsoft/Phi-3.5-mini-instruct",
        "microsoft/phi-4",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "THUDM/glm-4-9b-chat",
        "openai/gpt-oss-20b",
    ):
        assert needed in ids
    methods = {c.method for e in ENTRIES for c in e.checkpoints}
    assert {"awq", "gptq", "fp8", "compressed-tensors", "mxfp4", None} <= methods


def test_real_facts_through_catalog():
    q = catalog.get("Qwen/Qwen2.5-7B-Instruct")
    assert (q.num_hidden_layers, q.num_key_value_heads, q.head_dim) == (28, 4, 128)
    assert (q.weights_bytes, q.weights_source) == (15_231_233_024, SOURCE_CATALOG)
    llama = catalog.get("meta-llama/Llama-3.1-8B-Instruct")
    assert (llama.num_hidden_layers, llama.num_key_value_heads, llama.head_dim) == (32, 8, 128)
    assert llama.derived_max_model_len == 131072
    g = catalog.get("google/gemma-3-12b-it")
    assert g.is_multimodal and g.sliding_window == 1024
    assert g.layer_types.count(FULL_ATTENTION) == 8 and g.layer_types.count(SLIDING_ATTENTION) == 40
    oss = catalog.get("openai/gpt-oss-20b")
    assert oss.quantization is not None and oss.quantization.method == "mxfp4"
    assert oss.sliding_window == 128 and oss.layer_types[:2] == (SLIDING_ATTENTION, FULL_ATTENTION)


def test_quantized_checkpoint_lookup_case_insensitive():
    awq = catalog.get("qwen/qwen2.5-7b-instruct-awq")
    assert awq.model_id == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    assert awq.quantization is not None
    assert (awq.quantization.method, awq.quantization.bits, awq.quantization.group_size) == (
        "awq",
        4,
        128,
    )
    assert awq.num_hidden_layers == 28
    assert awq.weights_source == SOURCE_ESTIMATE
    assert any("unverified" in n for n in awq.notes)
    assert awq.source == "catalog:Qwen/Qwen2.5-7B-Instruct-AWQ"


def test_unknown_id_suggests_close_matches():
    with pytest.raises(ModelSpecError) as err:
        catalog.get("Qwen/Qwen2.5-7B-Instruct-AWX")
    assert "Qwen/Qwen2.5-7B-Instruct-AWQ" in str(err.value)


def _byte_model(entry: catalog.CatalogEntry, ckpt: catalog.CatalogCheckpoint) -> int:
    spec = catalog.get(ckpt.repo)
    return estimate_weight_bytes(
        spec,
        spec.quantization,
        text_config_of(entry.config),
        fp8_block=128 if ckpt.method == "fp8" else None,
    )


def _keeps_16bit_modules(ckpt: catalog.CatalogCheckpoint) -> bool:
    """The checkpoint's note says its size is a published one and names modules kept 16-bit."""
    note = ckpt.note.lower()
    return ("bf16" in note or "16-bit" in note) and any(
        w in note for w in ("logged", "model card", "the page gives"))


def test_quantized_sizes_are_sane():
    """Every quantized size lies between the bit-width floor and the 16-bit checkpoint; sizes
    confirmed by a file listing agree with the byte model within 0.5 %, except a published size
    of an upload that keeps modules 16-bit (its note names them), which lies above the byte
    model's all-quantized figure."""
    for e in ENTRIES:
        base = e.base_checkpoint.weights_bytes
        for c in e.checkpoints:
            if c.method is None or c.repo == e.id:
                continue
            assert c.bits is not None
            # an upload that keeps half its weights 16-bit (only the MLP quantized) lies higher
            slack = 0.5 if c.weights_source == "catalog" and _keeps_16bit_modules(c) else 0.35
            assert base * c.bits / 16 < c.weights_bytes < base * (c.bits / 16 + slack), c.repo
            text_bytes = _byte_model(e, c)
            if c.weights_source == "catalog" and _keeps_16bit_modules(c):
                assert c.weights_bytes > text_bytes, c.repo
            elif c.weights_source == "catalog":
                assert abs(c.weights_bytes / text_bytes - 1) < 0.005, c.repo
            else:
                # estimates are the byte model itself plus documented 16-bit extras
                # (vision encoder, an untied lm_head copy), never less
                assert c.weights_bytes >= text_bytes, c.repo


def test_bf16_base_is_two_bytes_per_parameter():
    for e in ENTRIES:
        base = e.base_checkpoint
        towers = any(k in (e.config or {}) for k in ("vision_config", "audio_config"))
        if base.method is None and base.weights_source == "catalog" and not towers:
            assert base.weights_bytes == 2 * e.params_total, e.id
        elif base.method is None:  # the text model's parameters, and any towers beside them
            assert base.weights_bytes >= 2 * e.params_total, e.id


def test_entry_metadata():
    waiting = {repo.lower() for repo, _why in catalog.unplannable()}
    for e in ENTRIES:
        assert 1 <= e.quality_tier <= 5
        assert e.params_active <= e.params_total
        assert e.license
        if e.id.lower() in waiting:  # listed before the planner reads its architecture
            continue
        assert e.context_length == catalog.get(e.id).derived_max_model_len
        assert e.license
    moe = next(e for e in ENTRIES if e.id == "Qwen/Qwen3-30B-A3B")
    assert moe.params_active < moe.params_total / 5
    assert next(e for e in ENTRIES if e.id.startswith("meta-llama/")).gated


def test_all_checkpoint_specs_cached_and_complete():
    specs = catalog.all_checkpoint_specs()
    waiting = catalog.unplannable()
    assert len(specs) + len(waiting) == sum(len(e.checkpoints) for e in ENTRIES)
    assert catalog.all_checkpoint_specs() is specs  # built once
    assert all(s.weights_bytes and s.weights_bytes > 0 for s in specs)
    assert len({s.model_id for s in specs}) == len(specs)


def test_unverified_entries_are_marked():
    unverified = [e.id for e in ENTRIES if not e.verified]
    assert unverified  # the reference set has partially verified entries; they stay marked
    waiting = {repo.lower() for repo, _why in catalog.unplannable()}
    for e in ENTRIES:
        if not e.verified and e.id.lower() not in waiting:
            spec = catalog.get(e.id)
            assert any("not fully verified" in n for n in spec.notes)


def test_catalog_entries_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ENTRIES[0].id = "x"  # type: ignore[misc]
