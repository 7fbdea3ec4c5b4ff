"""Settings, measurements and pidfiles that are corrupt, from a newer kvpilot, or unreadable
(a folder where the file should be: permissions do not stop root, a folder stops everyone).
Each is one sentence naming the file and the fix; nothing is overwritten or lost.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.fit.measurements import (
    SCHEMA_VERSION,
    Measured,
    MeasurementStore,
    measurement_key,
)
from kvpilot.core.vllm.orphans import ServerRecord, find_orphans, servers_dir, write_pidfile

KEY = measurement_key(
    gpu_name="cpu", gpu_total_bytes=1 << 30, model="m", vllm_version="0.32.0",
    settings=ServingSettings(), weights_bytes=1,
)
MEASURED = Measured(measured_at="2026-12-01T00:00:00Z", source="launch", kv_cache_tokens=7)


def test_settings_corrupt_newer_and_unreadable(tmp_path: Path) -> None:
    store = st.SettingsStore(tmp_path / "a")
    store.config_dir.mkdir()
    store.path.write_text('{"profiles": [', encoding="utf-8")
    result = store.load()
    (warning,) = result.warnings
    assert warning.kind == "corrupt" and warning.backup_path is not None
    assert warning.backup_path.read_text(encoding="utf-8") == '{"profiles": ['  # kept

    newer = st.SettingsStore(tmp_path / "b")
    newer.config_dir.mkdir()
    data = st.settings_to_json(st.Settings())
    data["schema_version"] = st.SCHEMA_VERSION + 5
    data["from_the_future"] = {"x": 1}
    newer.path.write_text(json.dumps(data), encoding="utf-8")
    loaded = newer.load()
    assert [w.kind for w in loaded.warnings] == ["newer_version"]
    newer.save(loaded.settings)
    assert json.loads(newer.path.read_text())["from_the_future"] == {"x": 1}  # kept

    unreadable = st.SettingsStore(tmp_path / "c")
    unreadable.path.mkdir(parents=True)  # a folder named settings.json
    with pytest.raises(SettingsError, match="cannot read"):
        unreadable.load()


def test_measurements_corrupt_newer_and_unreadable(tmp_path: Path) -> None:
    corrupt = MeasurementStore(tmp_path / "a.json")
    corrupt.path.write_text("{not json", encoding="utf-8")
    with pytest.raises(SettingsError, match="delete it to start over"):
        corrupt.lookup(KEY)
    assert corrupt.path.read_text(encoding="utf-8") == "{not json"  # not overwritten

    ours = MeasurementStore(tmp_path / "b.json")
    ours.record(KEY, MEASURED)
    data = json.loads(ours.path.read_text())
    data["schema"] = SCHEMA_VERSION + 1
    data["future"] = [1, 2, 3]
    ours.path.write_text(json.dumps(data), encoding="utf-8")
    before = ours.path.read_text()
    assert ours.lookup(KEY) == MEASURED  # still readable
    with pytest.raises(SettingsError, match="newer kvpilot"):
        ours.record(KEY, MEASURED)
    assert ours.path.read_text() == before  # what the newer version wrote is intact

    unreadable = MeasurementStore(tmp_path / "c.json")
    unreadable.path.mkdir()
    with pytest.raises(SettingsError, match="cannot read"):
        unreadable.lookup(KEY)


def test_pidfiles_corrupt_newer_and_unreadable(tmp_path: Path) -> None:
    folder = servers_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / "8001.json").write_text("{garbage", encoding="utf-8")
    (folder / "8002.json").mkdir()  # cannot be read nor deleted as a file
    record = ServerRecord(
        pid=os.getpid(), pgid=os.getpgid(0), port=8003, host="127.0.0.1", model="m",
        served_model_name="m", started_at=time.time(), log_path="", argv=("vllm",),
        create_time=0.0, owner_pid=1 << 22, owner_create_time=0.0,
    )
    path = write_pidfile(tmp_path, record)
    data = json.loads(path.read_text())
    data["written_by_a_newer_kvpilot"] = True
    path.write_text(json.dumps(data), encoding="utf-8")
    orphans = find_orphans(tmp_path)  # no exception for any of them
    assert not (folder / "8001.json").exists()  # a corrupt pidfile is stale: removed
    assert (folder / "8002.json").is_dir()  # what cannot be removed is skipped
    # the newer pidfile is read (unknown keys ignored); its pid is alive (this process)
    # but the create time does not match, so it is not mistaken for a live server
    assert all(o.record.port != 8001 for o in orphans)
