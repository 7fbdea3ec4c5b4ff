"""A model's spec from a fake Hugging Face cache, and the resolver's use of it, offline."""

from __future__ import annotations

import json
import struct

import pytest
from testpaths import DATA

from kvpilot.core.errors import ModelSpecError
from kvpilot.core.hub.cache import cached_repo_ids, cached_snapshot
from kvpilot.core.hub.metadata import load_cached_model
from kvpilot.core.models.resolve import load_model_spec
from kvpilot.core.models.spec import SOURCE_CATALOG, SOURCE_ESTIMATE, SOURCE_FILE

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
