"""MeasurementStore: record, replace, lookup, per-model listing, atomic file, bad files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.errors import SettingsError
from kvpilot.core.measurements import (
    SOURCE_DRY_RUN,
    SOURCE_LAUNCH,
    Measured,
    MeasurementKey,
    MeasurementStore,
)

KEY = MeasurementKey(
    gpu_name="NVIDIA GeForce RTX 4090",
    gpu_total_bytes=25_757_220_864,
    model_id="Qwen/Qwen2.5-7B-Instruct",
    vllm_version="0.33.0",
    weights_bytes=15_231_233_024,
    max_model_len=8192,
    max_num_seqs=16,
    kv_cache_dtype="auto",
    gpu_memory_utilization=0.9,
)


def measured(
    tokens: int, at: str = "2026-11-29T09:00:00+00:00", source: str = SOURCE_DRY_RUN
) -> Measured:
    return Measured(
        measured_at=at,
        source=source,
        weights_bytes=15_231_233_024,
        available_kv_bytes=tokens * 57_344,
        kv_cache_tokens=tokens,
        max_concurrency=tokens / 8192,
        concurrency_for_len=8192,
    )


def test_record_then_lookup_round_trips_through_the_file(tmp_path: Path) -> None:
    store = MeasurementStore(tmp_path / "m.json")
    assert store.lookup(KEY) is None
    store.record(KEY, measured(100_000))
    again = MeasurementStore(tmp_path / "m.json")
    got = again.lookup(KEY)
    assert got == measured(100_000)
    assert got is not None and got.complete


def test_same_key_replaces_other_settings_are_kept(tmp_path: Path) -> None:
    store = MeasurementStore(tmp_path / "m.json")
    store.record(KEY, measured(100_000))
    store.record(KEY, measured(120_000, source=SOURCE_LAUNCH))
    other = replace(KEY, max_model_len=16384)
    store.record(other, measured(90_000))
    assert len(store.all()) == 2
    m = store.lookup(KEY)
    assert m is not None and m.kv_cache_tokens == 120_000 and m.source == SOURCE_LAUNCH
    assert store.lookup(replace(KEY, kv_cache_dtype="fp8")) is None


def test_for_model_filters_by_gpu_model_version_newest_first(tmp_path: Path) -> None:
    store = MeasurementStore(tmp_path / "m.json")
    store.record(KEY, measured(1, at="2026-11-01T00:00:00+00:00"))
    store.record(replace(KEY, max_num_seqs=32), measured(2, at="2026-11-20T00:00:00+00:00"))
    store.record(replace(KEY, vllm_version="0.32.0"), measured(3))
    store.record(replace(KEY, gpu_name="NVIDIA RTX A6000"), measured(4))
    found = store.for_model(KEY.gpu_name, KEY.model_id, "0.33.0")
    assert [r.measured.kv_cache_tokens for r in found] == [2, 1]
    assert store.for_model(KEY.gpu_name, KEY.model_id, "0.33.0", gpu_total_bytes=1) == []


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.json"
    store = MeasurementStore(path)
    store.record(KEY, measured(5))
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
    data = json.loads(path.read_text())
    assert data["schema"] == 1 and data["entries"][0]["key"]["model_id"] == KEY.model_id


def test_a_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text("{not json")
    with pytest.raises(SettingsError, match="not a kvpilot measurement file"):
        MeasurementStore(path).lookup(KEY)


def test_unknown_fields_from_a_newer_version_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    store = MeasurementStore(path)
    store.record(KEY, measured(7))
    data = json.loads(path.read_text())
    data["entries"][0]["measured"]["future_field"] = 1
    path.write_text(json.dumps(data))
    assert store.lookup(KEY) == measured(7)
