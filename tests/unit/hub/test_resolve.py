"""load_model_spec: local directory, catalog id, repo id; clear errors."""

from __future__ import annotations

import pytest

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_CATALOG
from kvpilot.core.hub.resolve import load_model_spec


def test_local_directory(model_copy):
    d = model_copy("qwen3-8b")
    spec = load_model_spec(str(d))
    assert spec.model_id == str(d) and spec.head_dim == 128


def test_config_json_path_means_its_directory(model_copy):
    d = model_copy("qwen3-8b")
    assert load_model_spec(str(d / "config.json")).num_hidden_layers == 36


def test_catalog_id(hf_cache):
    spec = load_model_spec("Qwen/Qwen3-8B-FP8")
    assert spec.quantization is not None and spec.quantization.method == "fp8"
    base = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    assert base.weights_source == SOURCE_CATALOG


def test_missing_path(tmp_path):
    with pytest.raises(ModelSpecError, match="no such model directory"):
        load_model_spec(str(tmp_path / "missing" / "model"))


def test_a_file_is_not_a_model(tmp_path):
    f = tmp_path / "weights.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelSpecError, match="not a model directory"):
        load_model_spec(str(f))


def test_empty_ref():
    with pytest.raises(ModelSpecError, match="no model given"):
        load_model_spec("  ")


def test_not_a_repo_id(hf_cache):
    with pytest.raises(ModelSpecError, match="org/name"):
        load_model_spec("qwen-7b")
