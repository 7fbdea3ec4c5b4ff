"""MeasurementStore: record, replace, lookup, per-model listing, atomic file, bad files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.fit.measurements import (
    SOURCE_DRY_RUN,
    SOURCE_LAUNCH,
    Measured,
    MeasurementKey,
    MeasurementStore,
    ReportedCapacity,
    launch_recorder,
    measured_from_reported,
    measurement_key,
)

SETTINGS = ServingSettings(max_model_len=8192, max_num_seqs=16, gpu_memory_utilization=0.9)
KEY = measurement_key(
    gpu_name="NVIDIA GeForce RTX 4090",
    gpu_total_bytes=25_757_220_864,
    model="Qwen/Qwen2.5-7B-Instruct",
    vllm_version="0.33.0",
    settings=SETTINGS,
    weights_bytes=15_231_233_024,
)


def with_settings(key: MeasurementKey, **changes: object) -> MeasurementKey:
    return replace(key, settings=replace(key.settings, **changes))


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
    other = with_settings(KEY, max_model_len=16384)
    store.record(other, measured(90_000))
    assert len(store.all()) == 2
    m = store.lookup(KEY)
    assert m is not None and m.kv_cache_tokens == 120_000 and m.source == SOURCE_LAUNCH
    assert store.lookup(with_settings(KEY, kv_cache_dtype="fp8")) is None


def test_for_model_filters_by_gpu_model_version_newest_first(tmp_path: Path) -> None:
    store = MeasurementStore(tmp_path / "m.json")
    store.record(KEY, measured(1, at="2026-11-01T00:00:00+00:00"))
    store.record(with_settings(KEY, max_num_seqs=32), measured(2, at="2026-11-20T00:00:00+00:00"))
    store.record(replace(KEY, vllm_version="0.32.0"), measured(3))
    store.record(replace(KEY, gpu_name="NVIDIA RTX A6000"), measured(4))
    found = store.for_model(KEY)
    assert [r.measured.kv_cache_tokens for r in found] == [2, 1]
    assert store.for_model(replace(KEY, gpu_total_bytes=1)) == []
    # the spec table's short name and NVML's name are the same card
    assert [r.measured.kv_cache_tokens for r in store.for_model(replace(KEY, gpu_name="RTX 4090"))
            ] == [2, 1]


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "m.json"
    store = MeasurementStore(path)
    store.record(KEY, measured(5))
    assert [p.name for p in path.parent.iterdir()] == ["m.json"]
    data = json.loads(path.read_text())
    assert data["schema"] == 2 and data["entries"][0]["key"]["model_id"] == KEY.model_id
    assert data["entries"][0]["key"]["settings"]["max_model_len"] == 8192


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


def test_the_key_is_the_same_for_a_repo_id_and_its_snapshot_folder(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-7B-Instruct" / "snapshots" / "a1b2c3"
    snapshot.mkdir(parents=True)
    by_folder = measurement_key(
        gpu_name=KEY.gpu_name, gpu_total_bytes=KEY.gpu_total_bytes, model=str(snapshot),
        vllm_version="0.33.0", settings=SETTINGS,
    )
    assert by_folder == KEY
    assert by_folder.model_id == "Qwen/Qwen2.5-7B-Instruct"


def test_the_release_is_normalised_and_the_build_variant_kept_apart() -> None:
    cpu = measurement_key(
        gpu_name="cpu", gpu_total_bytes=1 << 34, model="org/m", vllm_version="0.32.0+cpu",
        settings=SETTINGS,
    )
    plain = replace(cpu, vllm_version="0.32.0", vllm_variant=None)
    assert (cpu.vllm_version, cpu.vllm_variant) == ("0.32.0", "cpu")
    assert cpu == plain and cpu.same_model(plain)


def test_a_schema_1_file_with_flat_settings_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    flat_key = {
        "gpu_name": "cpu", "gpu_total_bytes": 1 << 34,
        "model_id": str(tmp_path / "models--org--tiny" / "snapshots" / "rev"),
        "vllm_version": "0.32.0+cpu", "weights_bytes": 1000, "max_model_len": 512,
        "max_num_seqs": 4, "max_num_batched_tokens": None, "kv_cache_dtype": "auto",
        "gpu_memory_utilization": None, "kv_cache_memory_bytes": 1 << 26,
        "enforce_eager": True, "quantization": None,
    }
    entry = {"key": flat_key, "measured": {"measured_at": "2026-11-01T00:00:00+00:00",
                                           "source": "launch", "kv_cache_tokens": 9}}
    path.write_text(json.dumps({"schema": 1, "entries": [entry]}))
    [record] = MeasurementStore(path).all()
    assert record.key.model_id == "org/tiny" and record.key.vllm_version == "0.32.0"
    assert record.key.settings == ServingSettings(
        max_model_len=512, max_num_seqs=4, kv_cache_memory_bytes=1 << 26, enforce_eager=True
    )
    assert record.measured.kv_cache_tokens == 9


def test_a_key_with_a_wrongly_typed_setting_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    store = MeasurementStore(path)
    store.record(KEY, measured(7))
    data = json.loads(path.read_text())
    data["entries"][0]["key"]["settings"]["max_model_len"] = "long"
    path.write_text(json.dumps(data))
    with pytest.raises(SettingsError, match="max_model_len must be a whole number"):
        store.all()


def test_reported_capacity_merges_log_then_metrics_and_maps_to_measured() -> None:
    log = {"kv_cache_tokens": 1_048_000, "available_kv_bytes": 1_073_000_000,
           "max_concurrency": 1023.5, "max_concurrency_at_len": 1024, "num_gpu_blocks": 8190,
           "total_bytes": 24 << 30}  # a figure the reported capacity does not keep
    cap = ReportedCapacity().merged("log", **ReportedCapacity.values_from_log(log))
    assert (cap.concurrency_for_len, cap.num_blocks, cap.sources) == (1024, 8190, ("log",))
    assert cap.kv_bytes == 1_073_000_000  # the log's rounded figure until /metrics says more
    cap = cap.merged("metrics", kv_cache_tokens=1_048_576, kv_cache_memory_bytes=1 << 30,
                     num_blocks=8192, block_size=128, max_concurrency=None)
    assert (cap.kv_cache_tokens, cap.num_blocks, cap.max_concurrency) == (1_048_576, 8192, 1023.5)
    assert cap.kv_bytes == 1 << 30 and cap.sources == ("log", "metrics")
    assert cap.merged("metrics") is cap and ReportedCapacity().empty and not cap.empty
    measured = measured_from_reported(cap, "launch", startup_s=12.5)
    assert (measured.source, measured.startup_s, measured.available_kv_bytes) == (
        "launch", 12.5, 1 << 30)
    assert (measured.kv_cache_tokens, measured.num_blocks, measured.block_size) == (
        1_048_576, 8192, 128)
    assert measured.complete


def test_the_launch_recorder_stores_what_a_ready_server_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The supervisor's ``on_ready_capacity`` hook: the figures land under the plan's key as a
    launch measurement; a store that cannot be written is a warning, never an exception."""
    cap = ReportedCapacity().merged("log", kv_cache_tokens=131_072, kv_cache_memory_bytes=7 << 30,
                                    num_blocks=8192, max_concurrency=16.0,
                                    concurrency_for_len=8192)
    store = MeasurementStore(tmp_path / "m.json")
    launch_recorder(store, KEY)(cap, 41.5)
    got = store.lookup(KEY)
    assert got is not None
    assert (got.source, got.startup_s, got.kv_cache_tokens, got.available_kv_bytes) == (
        SOURCE_LAUNCH, 41.5, 131_072, 7 << 30)

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    launch_recorder(MeasurementStore(broken), KEY)(cap, None)  # does not raise
    assert "the measured capacity was not recorded" in caplog.text
    assert broken.read_text() == "{not json"  # nothing lost: the damaged file is left for the user
