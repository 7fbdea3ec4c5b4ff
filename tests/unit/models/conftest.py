"""Helpers for model-spec tests: tiny safetensors files, model directories, a fake HF cache."""

from __future__ import annotations

import json
import shutil
import struct
from math import prod
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "models"

#: bytes per element of the dtypes the tests write
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "F8_E4M3": 1, "I8": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """Write a valid safetensors file (zero-filled tensors); returns the bytes of tensor data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def copy_model(name: str, dest: Path) -> Path:
    """Copy the fixture directory ``tests/data/models/<name>`` to ``dest`` and return it."""
    shutil.copytree(DATA_DIR / name, dest)
    return dest


@pytest.fixture
def qwen_dir(tmp_path: Path) -> Path:
    return copy_model("qwen2.5-7b-instruct", tmp_path / "qwen")


def make_hf_cache(
    cache: Path, repo_id: str, files: dict[str, bytes], revision: str = "0123abcd" * 5
) -> Path:
    """Lay out ``models--org--name/{refs/main,blobs,snapshots/<rev>}`` like huggingface_hub does."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(revision)
    blobs = repo_dir / "blobs"
    blobs.mkdir()
    snap = repo_dir / "snapshots" / revision
    snap.mkdir(parents=True)
    for i, (name, content) in enumerate(files.items()):
        blob = blobs / f"{i:040x}"
        blob.write_bytes(content)
        (snap / name).symlink_to(Path("../../blobs") / blob.name)
    return snap


@pytest.fixture
def st_file():
    """The :func:`write_safetensors` helper, as a fixture (test modules cannot import conftest)."""
    return write_safetensors


@pytest.fixture
def model_copy(tmp_path: Path):
    """Copy a fixture model directory into tmp_path: ``model_copy("qwen3-8b") -> Path``."""

    def _copy(name: str) -> Path:
        return copy_model(name, tmp_path / name)

    return _copy


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty HF hub cache set as HF_HUB_CACHE; returns ``add(repo_id, files) -> snapshot``."""
    cache = tmp_path / "hf-home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HOME", raising=False)

    def _add(repo_id: str, files: dict[str, bytes], revision: str = "0123abcd" * 5) -> Path:
        return make_hf_cache(cache, repo_id, files, revision)

    _add.cache = cache  # type: ignore[attr-defined]
    return _add
