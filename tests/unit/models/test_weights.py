"""Exact weight bytes from safetensors headers and the index fallback."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_FILE, SOURCE_INDEX
from kvpilot.core.models.local import load_local_model
from kvpilot.core.models.weights import (
    checkpoint_weight_size,
    read_safetensors_header,
    safetensors_tensor_bytes,
)


def test_tiny_file_exact_bytes(tmp_path, st_file):
    f = tmp_path / "model.safetensors"
    n = st_file(f, {"embed": ("BF16", [11, 4]), "scale": ("F32", [3]), "q": ("F8_E4M3", [5, 2])})
    assert n == 11 * 4 * 2 + 3 * 4 + 10
    assert safetensors_tensor_bytes(f) == (n, 3)
    header = read_safetensors_header(f)
    assert header["__metadata__"] == {"format": "pt"}
    assert header["embed"]["shape"] == [11, 4]


def test_shards_summed(tmp_path, st_file):
    a = st_file(tmp_path / "model-00001-of-00002.safetensors", {"x": ("BF16", [100, 3])})
    b = st_file(tmp_path / "model-00002-of-00002.safetensors", {"y": ("I32", [7])})
    size = checkpoint_weight_size(tmp_path)
    assert size is not None
    assert size.total_bytes == a + b == 628
    assert size.source == SOURCE_FILE and size.tensor_count == 2
    assert len(size.files) == 2


def _index(d: Path, shards: list[str], total: int) -> None:
    weight_map = {f"t{i}": s for i, s in enumerate(shards)}
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )


def test_index_fallback_when_shards_absent(model_copy):
    d = model_copy("qwen2.5-7b-instruct")
    _index(d, ["model-00001-of-00004.safetensors", "model-00004-of-00004.safetensors"], 15231233024)
    spec = load_local_model(d)
    assert spec.weights_bytes == 15231233024
    assert spec.weights_source == SOURCE_INDEX


def test_index_limits_files_to_its_shards(tmp_path, st_file):
    a = st_file(tmp_path / "model-00001-of-00001.safetensors", {"x": ("BF16", [8])})
    st_file(tmp_path / "consolidated.safetensors", {"x": ("BF16", [8])})  # Mistral duplicate
    _index(tmp_path, ["model-00001-of-00001.safetensors"], 999)
    size = checkpoint_weight_size(tmp_path)
    assert size is not None
    # all shards of the index present: their headers win over the index figure
    assert (size.total_bytes, size.source) == (a, SOURCE_FILE)


def test_partial_shards_use_index_with_note(tmp_path, st_file):
    st_file(tmp_path / "model-00001-of-00002.safetensors", {"x": ("BF16", [8])})
    _index(tmp_path, ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"], 4242)
    size = checkpoint_weight_size(tmp_path)
    assert size is not None
    assert (size.total_bytes, size.source) == (4242, SOURCE_INDEX)
    assert "1 of 2 shards" in size.notes[0]


def test_index_without_total(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    with pytest.raises(ModelSpecError) as err:
        checkpoint_weight_size(tmp_path)
    assert err.value.field == "metadata.total_size"


def test_no_safetensors(tmp_path):
    assert checkpoint_weight_size(tmp_path) is None


# --- malformed files ------------------------------------------------------------------------


def test_file_shorter_than_length_prefix(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"\x10\x00\x00")
    with pytest.raises(ModelSpecError, match="truncated") as err:
        safetensors_tensor_bytes(f)
    assert err.value.path == str(f)


def test_header_longer_than_file(tmp_path, st_file):
    f = tmp_path / "model.safetensors"
    st_file(f, {"x": ("BF16", [4])})
    f.write_bytes(f.read_bytes()[:20])  # cut inside the JSON header
    with pytest.raises(ModelSpecError, match="truncated") as err:
        safetensors_tensor_bytes(f)
    assert str(f) in str(err.value)


def test_header_not_json(tmp_path):
    f = tmp_path / "model.safetensors"
    raw = b"{not json at all"
    f.write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(ModelSpecError, match="not valid JSON") as err:
        safetensors_tensor_bytes(f)
    assert err.value.path == str(f)


def test_data_missing_after_header(tmp_path, st_file):
    f = tmp_path / "model.safetensors"
    st_file(f, {"x": ("BF16", [1000])})
    f.write_bytes(f.read_bytes()[:-10])  # incomplete download: last tensor bytes missing
    with pytest.raises(ModelSpecError, match="incomplete download"):
        safetensors_tensor_bytes(f)


def test_offsets_disagree_with_shape(tmp_path):
    f = tmp_path / "model.safetensors"
    header = {"x": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}
    raw = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(6))
    with pytest.raises(ModelSpecError, match="corrupt"):
        safetensors_tensor_bytes(f)


def test_unknown_dtype(tmp_path):
    f = tmp_path / "model.safetensors"
    header = {"x": {"dtype": "Q3", "shape": [4], "data_offsets": [0, 4]}}
    raw = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(4))
    with pytest.raises(ModelSpecError, match="unknown dtype"):
        safetensors_tensor_bytes(f)


def test_truncated_shard_fails_the_model_load(model_copy):
    d = model_copy("qwen3-8b")
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10_000) + b"{}")
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert str(d / "model.safetensors") in str(err.value)
