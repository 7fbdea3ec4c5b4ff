"""A model's spec from a fake Hugging Face cache, and the resolver's use of it, offline."""

from __future__ import annotations

import json
import struct

import pytest
from testpaths import DATA

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_CATALOG, SOURCE_ESTIMATE, SOURCE_FILE
from kvpilot.core.hub.cache import cached_repo_ids, cached_snapshot
from kvpilot.core.hub.metadata import load_cached_model
from kvpilot.core.hub.resolve import load_model_spec

DATA_DIR = DATA / "models"


def _config(name: str) -> bytes:
    return (DATA_DIR / name / "config.json").read_bytes()


def _safetensors(nbytes: int) -> bytes:
    header = json.dumps({"w": {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}})
    raw = header.encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(nbytes)


def test_cached_model_read_from_snapshot(hf_cache):
    snap = hf_cache(
        "Qwen/Qwen2.5-7B-Instruct",
        {"config.json": _config("qwen2.5-7b-instruct"), "model.safetensors": _safetensors(1234)},
    )
    assert cached_snapshot("Qwen/Qwen2.5-7B-Instruct") == snap
    spec = load_cached_model("Qwen/Qwen2.5-7B-Instruct")
    assert spec is not None
    assert spec.model_id == "Qwen/Qwen2.5-7B-Instruct"
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (28, 4, 128)
    assert (spec.weights_bytes, spec.weights_source) == (1234, SOURCE_FILE)
    assert spec.source == f"hub-cache:Qwen/Qwen2.5-7B-Instruct@{snap.name}"
    assert cached_repo_ids() == ("Qwen/Qwen2.5-7B-Instruct",)


def test_not_cached(hf_cache):
    assert load_cached_model("org/absent") is None
    assert cached_repo_ids() == ()


def test_resolver_prefers_cache_with_weights_over_catalog(hf_cache):
    hf_cache(
        "Qwen/Qwen2.5-7B-Instruct",
        {"config.json": _config("qwen2.5-7b-instruct"), "model.safetensors": _safetensors(77)},
    )
    spec = load_model_spec("Qwen/Qwen2.5-7B-Instruct")
    assert (spec.weights_bytes, spec.weights_source) == (77, SOURCE_FILE)


def test_resolver_catalog_when_cache_has_config_only(hf_cache):
    hf_cache("Qwen/Qwen2.5-7B-Instruct", {"config.json": _config("qwen2.5-7b-instruct")})
    spec = load_model_spec("Qwen/Qwen2.5-7B-Instruct")
    assert spec.weights_source == SOURCE_CATALOG
    assert spec.weights_bytes == 15_231_233_024


def test_resolver_cache_config_only_not_in_catalog(hf_cache):
    hf_cache("someone/tiny-llama", {"config.json": _config("llama-3.1-8b-instruct")})
    spec = load_model_spec("someone/tiny-llama")
    assert spec.weights_source == SOURCE_ESTIMATE
    assert spec.num_hidden_layers == 32


def test_resolver_unknown_repo_offline(hf_cache):
    with pytest.raises(ModelSpecError) as err:
        load_model_spec("nobody/nothing-here")
    msg = str(err.value)
    assert "not in the Hugging Face cache" in msg and str(hf_cache.cache) in msg
    assert "hf download nobody/nothing-here" in msg


def test_hub_weight_bytes_leave_the_mtp_tensors_out():
    """The Hub's per-file headers (huggingface_hub's own records) name the MTP tensors of a
    Qwen3.5 checkpoint; their byte ranges come off the weight figure and are kept apart."""
    from huggingface_hub.utils._safetensors import (
        SafetensorsFileMetadata,
        SafetensorsRepoMetadata,
        TensorInfo,
    )

    from kvpilot.core.hub.metadata import _hub_mtp_bytes

    config = json.loads(_config("qwen3.5-27b"))
    files = {
        "model-00001-of-00002.safetensors": SafetensorsFileMetadata(metadata={}, tensors={
            "model.language_model.layers.0.mlp.up_proj.weight":
                TensorInfo(dtype="BF16", shape=[16, 8], data_offsets=(0, 256)),
        }),
        "model-00002-of-00002.safetensors": SafetensorsFileMetadata(metadata={}, tensors={
            "mtp.fc.weight": TensorInfo(dtype="BF16", shape=[8, 16], data_offsets=(0, 256)),
            "mtp.norm.weight": TensorInfo(dtype="BF16", shape=[8], data_offsets=(256, 272)),
        }),
    }
    meta = SafetensorsRepoMetadata(metadata=None, sharded=True, weight_map={}, files_metadata=files)
    assert _hub_mtp_bytes(config, meta) == 272
    assert _hub_mtp_bytes(config, meta, shared_copies_only=True) == 0  # no head copy here
    assert _hub_mtp_bytes(json.loads(_config("qwen2.5-7b-instruct")), meta) == 0
