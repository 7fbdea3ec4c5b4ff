"""The Runs tab (offscreen): real run records in the window's data directory are listed newest
first, two or more compared side by side with the best value marked, a damaged record is said
and skipped, and Relaunch needs exactly one run. (Relaunching one against the real engine:
tests/gui/test_main_window_e2e.py.)"""

from __future__ import annotations

import os

from kvpilot.core.runs.record import STOPPED, LevelSummary, LoadTestSummary, RunRecord
from kvpilot.core.runs.store import RunStore


def _run(run_id: str, kv: int, tps: tuple[float, float], jpt: float) -> RunRecord:
    levels = tuple(
        LevelSummary(concurrency=c, requests_ok=8, errors=0, output_tokens_per_s=t,
                     requests_per_s=1.0, ttft_p50_s=0.05 * c, ttft_p99_s=0.1 * c,
                     tpot_p50_s=0.02, tpot_p99_s=0.03, j_per_token=jpt * c)
        for c, t in zip((1, 4), tps, strict=True))
    return RunRecord(
        id=run_id, started_at=f"2026-01-0{run_id[7]}T10:00:00Z",
        model="/models/Qwen2.5-7B-Instruct", state=STOPPED, owner_pid=os.getpid(),
        settings={"max_model_len": 8192, "kv_cache_dtype": "fp8" if kv > 100_000 else "auto"},
        predicted={"kv_cache_tokens": kv + 1000}, reported={"kv_cache_tokens": kv},
        load_tests=(LoadTestSummary(at="t", api="completions", prompt_tokens=256,
                                    output_tokens=128, ttft_slo_s=1.0, tpot_slo_s=0.05,
                                    levels=levels),),
    )


def test_runs_tab_lists_compares_and_warns(make_window, qtbot) -> None:
    w = make_window()
    store = RunStore(w.services.data_dir)
    a = _run("20260101-100000-aaaa", 60_000, (45.0, 150.0), 0.9)
    b = _run("20260102-100000-bbbb", 120_000, (44.0, 190.0), 0.8)
    for rec in (a, b):
        store.write(rec)
    store.folder.joinpath("20260103-100000-cccc.json").write_text("{ torn")
    view = w.runs_view
    w.tabs.setCurrentWidget(view)  # showing the tab reads the folder (on the pool)
    qtbot.waitUntil(lambda: len(view.runs) == 2, timeout=10_000)
    assert [r.id for r in view.runs] == [b.id, a.id]
    assert view.table.item(0, 4).text() == "120,000"
    assert "skipped damaged run record 20260103-100000-cccc.json" in view.status.text()
    view.select_runs([a.id])
    assert view.relaunch_button.isEnabled()
    assert view.compare_table.columnCount() == 1  # one run: shown alone
    view.select_runs([a.id, b.id])
    assert not view.relaunch_button.isEnabled()
    table = view.compare_table
    assert table.columnCount() == 2
    labels = [table.verticalHeaderItem(r).text() for r in range(table.rowCount())]
    for wanted in ("KV tokens reported", "output tokens/s @ 4", "TTFT P99 @ 4",
                   "TPOT P50 @ 1", "J/token @ 4"):
        assert wanted in labels
    # b (newest, first column) serves more KV and more tokens/s at 4 users, a is faster alone
    assert view.best_cell("KV tokens reported") == 0
    assert view.best_cell("output tokens/s @ 4") == 0
    assert view.best_cell("output tokens/s @ 1") == 1
    row = labels.index("output tokens/s @ 4")
    assert table.item(row, 0).font().bold() and not table.item(row, 1).font().bold()
    assert table.item(row, 0).text() == "190.0 tokens/s"


def test_relaunch_without_vllm_says_why(make_window, qtbot, monkeypatch) -> None:
    w = make_window()
    RunStore(w.services.data_dir).write(_run("20260101-100000-aaaa", 60_000, (45.0, 150.0), 0.9))
    w.runs_control.refresh()
    qtbot.waitUntil(lambda: len(w.runs_view.runs) == 1, timeout=10_000)
    monkeypatch.setattr(w.runtime_control, "runtime", None)
    w.runs_view.select_runs(["20260101-100000-aaaa"])
    w.runs_view.relaunch_button.click()
    assert "no vLLM" in w.statusBar().currentMessage()


def test_the_run_list_takes_the_tab_until_runs_are_compared(make_window, qtbot) -> None:
    """Five runs, none selected: the list has the whole tab (no empty comparison pane under
    two visible rows); two selected: the comparison shows below, every run still in view."""
    w = make_window()
    w.resize(1366, 768)
    store = RunStore(w.services.data_dir)
    ids = [f"2026010{i}-100000-{c * 4}" for i, c in zip(range(1, 6), "abcde", strict=True)]
    for i, run_id in enumerate(ids):
        store.write(_run(run_id, 50_000 + 10_000 * i, (40.0 + i, 150.0 + i), 0.9))
    view = w.runs_view
    w.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: len(view.runs) == 5, timeout=10_000)
    qtbot.wait(50)
    assert not view.compare_table.isVisible()
    rows_height = sum(view.table.rowHeight(r) for r in range(5))
    assert view.table.viewport().height() >= rows_height
    view.select_runs([ids[0], ids[1]])
    qtbot.waitUntil(view.compare_table.isVisible, timeout=5_000)
    qtbot.wait(50)
    assert view.table.viewport().height() >= rows_height  # all five runs still shown
    assert view.compare_table.height() > view.table.height() // 2
    view.table.clearSelection()
    assert not view.compare_table.isVisible()
