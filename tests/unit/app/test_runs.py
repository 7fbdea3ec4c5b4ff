"""The runs kept, as both faces read them: real records written to a run store are listed
newest first with a damaged file named, read back by id in the order asked, and compared with
each cell in words and the best value's column marked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvpilot.core.app.runs import compare_runs, list_runs, read_runs
from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.runs.record import STOPPED, RunRecord
from kvpilot.core.runs.store import RunStore


def _run(run_id: str, day: int, kv: int) -> RunRecord:
    return RunRecord(
        id=run_id, started_at=f"2026-01-0{day}T10:00:00Z", model="/models/Qwen2.5-7B-Instruct",
        state=STOPPED, owner_pid=os.getpid(), settings={"max_model_len": 8192},
        predicted={"kv_cache_tokens": kv + 1000}, reported={"kv_cache_tokens": kv},
    )


def test_list_read_and_compare(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    a, b = _run("20260101-100000-aaaa", 1, 60_000), _run("20260102-100000-bbbb", 2, 120_000)
    for rec in (a, b):
        store.write(rec)
    store.folder.joinpath("20260103-100000-cccc.json").write_text("{ torn")
    found = list_runs(tmp_path)
    assert [r.id for r in found.records] == [b.id, a.id]
    assert any("20260103-100000-cccc.json" in w for w in found.warnings)
    runs = read_runs([a.id, b.id], tmp_path)
    assert [r.id for r in runs] == [a.id, b.id]
    shown = compare_runs(runs)
    row = next(r for r in shown.rows if r.label == "KV tokens reported")
    assert row.cells == ("60,000", "120,000")
    assert row.best == 1 == shown.best_of("KV tokens reported")
    assert row.better == "higher"
    assert shown.comparison.run_ids == (a.id, b.id)


def test_compare_needs_two_unless_told(tmp_path: Path) -> None:
    one = [_run("20260101-100000-aaaa", 1, 60_000)]
    with pytest.raises(KvpilotError, match="two runs or more"):
        compare_runs(one)
    assert compare_runs(one, minimum=1).comparison.run_ids == (one[0].id,)
    with pytest.raises(KvpilotError):
        read_runs(["20260109-100000-zzzz"], tmp_path)
