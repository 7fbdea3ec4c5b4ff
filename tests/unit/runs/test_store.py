"""Run records on disk: atomic writes, damaged records skipped, lost runs, pruning, and
``kvpilot runs`` (list, show, compare) over them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from runskit import level, record

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.cli import main as cli_main
from kvpilot.core.runs.record import (
    LOST,
    RUNNING,
    LoadTestSummary,
    record_from_json,
)
from kvpilot.core.runs.store import RunStore, new_run_id


def test_write_read_round_trip_is_atomic_and_private(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    test = LoadTestSummary(at="2026-01-01T10:05:00Z", api="completions", prompt_tokens=256,
                           output_tokens=128, ttft_slo_s=1.0, tpot_slo_s=0.05,
                           levels=(level(1, 50.0, 0.1, 0.8), level(4, 150.0, 0.3, 1.4)))
    rec = record(new_run_id(), load_tests=(test,), startup_s=float("nan"))
    store.write(rec)
    path = store.path(rec.id)
    assert path.stat().st_mode & 0o777 == 0o600
    assert not [p for p in path.parent.iterdir() if p != path]  # no temporary file left
    back = store.read(rec.id)
    assert back.startup_s is None  # NaN is not JSON: kept as none
    assert back.load_tests == rec.load_tests and back.reported == rec.reported
    assert back.levels_by_concurrency()[4].throttle_reasons == ("power cap",)
    assert back.best_tokens_per_s == 150.0


def test_damaged_records_are_skipped_with_a_warning(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    good = record("20260101-100000-aaaa")
    store.write(good)
    folder = store.folder
    (folder / "20260101-110000-bbbb.json").write_text("{ torn", encoding="utf-8")
    (folder / "20260101-120000-cccc.json").write_text(json.dumps({"format": "other"}))
    wrong = good.to_json() | {"id": "20260101-130000-dddd", "startup_s": "fast"}
    (folder / "20260101-130000-dddd.json").write_text(json.dumps(wrong))
    levels = good.to_json() | {"id": "20260101-140000-eeee", "load_tests": [{"levels": 3}]}
    (folder / "20260101-140000-eeee.json").write_text(json.dumps(levels))
    (folder / "20260101-150000-ffff.json").write_bytes(b"\xff\xfe\x00")
    found = store.records()
    assert [r.id for r in found.records] == [good.id]
    assert len(found.warnings) == 5
    assert all("skipped damaged run record" in w for w in found.warnings)
    with pytest.raises(KvpilotError, match="damaged"):
        store.read("20260101-110000-bbbb")
    with pytest.raises(KvpilotError, match="not a run id"):
        store.read("../../etc/passwd")


def test_a_running_record_of_a_dead_kvpilot_reads_as_lost(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    store = RunStore(tmp_path)
    store.write(record("20260101-100000-aaaa", state=RUNNING, owner_pid=proc.pid))
    store.write(record("20260101-100001-aaaa", state=RUNNING))  # this process: alive
    states = {r.id: r.state for r in store.records().records}
    assert states == {"20260101-100000-aaaa": LOST, "20260101-100001-aaaa": RUNNING}


def test_prune_by_age_then_size_never_a_live_run(tmp_path: Path) -> None:
    store = RunStore(tmp_path, max_age_days=30, max_total_bytes=3000)
    now = time.time()
    old = record("20250101-100000-0001")
    live = record("20250101-100000-0002", state=RUNNING)
    store.write(old)
    store.write(live)
    for rec in (old, live):
        os.utime(store.path(rec.id), (now - 40 * 86400, now - 40 * 86400))
    padding = {"note": "x" * 1500}
    recent = []
    for i in range(4):
        rec = record(f"20260101-10000{i}-0003", settings=padding)
        store.write(rec)
        os.utime(store.path(rec.id), (now - 3600 * (10 - i),) * 2)
        recent.append(rec.id)
    removed = {p.stem for p in store.prune(now_s=now)}
    assert old.id in removed and live.id not in removed
    left = {p.stem for p in store.folder.glob("*.json")}
    assert live.id in left
    assert sum(store.path(i).stat().st_size for i in left) <= 3000 + store.path(
        live.id).stat().st_size
    assert recent[-1] in left and recent[0] not in left  # the oldest finished go first


def test_runs_cli_list_show_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = RunStore(tmp_path)
    a, b = record("20260101-100000-aaaa"), record("20260101-110000-bbbb", profile="fp8")
    store.write(a)
    store.write(b)
    store.folder.joinpath("20260101-120000-cccc.json").write_text("nope")
    assert cli_main(["runs", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr()
    assert out.out.index(b.id) < out.out.index(a.id)  # newest first
    assert "[fp8]" in out.out and "skipped damaged run record" in out.err
    assert cli_main(["runs", "--data-dir", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in data["runs"]] == [b.id, a.id] and len(data["warnings"]) == 1
    assert record_from_json(data["runs"][0]) == replace(b)
    assert cli_main(["runs", "--data-dir", str(tmp_path), "show", a.id]) == 0
    assert "KV" not in capsys.readouterr().err
    assert cli_main(["runs", "--data-dir", str(tmp_path), "compare", a.id, b.id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"] == [a.id, b.id]
    assert cli_main(["runs", "--data-dir", str(tmp_path), "show", "20990101-000000-0000"]) == 2
    assert "no run" in capsys.readouterr().err


def test_a_fronts_swaps_are_kept_in_the_record_and_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RunStore(tmp_path)
    swap = {"at": "2026-12-06T11:00:00Z", "profile": "fp8", "kind": "start",
            "reason": "request for 'coder'; chat stopped to make room", "wait_s": 41.5,
            "load_s": 38.25, "made_room": ["chat"], "ok": True, "failure_kind": ""}
    rec = replace(record("20260101-100000-aaaa", profile="fp8"), swaps=(swap,))
    store.write(rec)
    back = store.read(rec.id)
    assert back.swaps == (swap,) and back == rec
    assert cli_main(["runs", "--data-dir", str(tmp_path), "show", rec.id]) == 0
    out = capsys.readouterr().out
    assert "front start 2026-12-06T11:00:00Z: request for 'coder'; chat stopped to make room; " \
        "waited 41.5 s, loaded in 38.25 s" in out
