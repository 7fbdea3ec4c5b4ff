"""Panels on their own: thread hand-over, dashboard from recorded /metrics, log bounds, banner."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
from PySide6.QtCore import QThread
from PySide6.QtWidgets import QApplication

from kvpilot.core.telemetry import Telemetry
from kvpilot.core.vllm.metrics import ScrapeError, ScrapeErrorKind, parse_metrics
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.fallback import FallbackBanner, FallbackChoice
from kvpilot.gui.panels.dashboard_panel import DashboardPanel
from kvpilot.gui.panels.server_panel import LogView
from kvpilot.gui.workers import run_in_pool

METRICS = Path(__file__).resolve().parents[1] / "data" / "metrics"


def test_core_thread_callbacks_arrive_on_the_gui_thread(qtbot) -> None:
    bridge = CoreBridge()
    seen: list[tuple[object, bool]] = []
    gui_thread = QApplication.instance().thread()
    bridge.server_event.connect(lambda ev: seen.append((ev, QThread.currentThread() is gui_thread)))
    emit = bridge.emitter("server_event")
    t = threading.Thread(target=lambda: [emit(i) for i in range(5)])
    with qtbot.waitSignals([bridge.server_event] * 5, timeout=5000):
        t.start()
    t.join()
    qtbot.waitUntil(lambda: len(seen) == 5)
    assert [ev for ev, _ in seen] == list(range(5))
    assert all(on_gui for _, on_gui in seen)


def test_pool_work_reports_results_and_errors_on_the_gui_thread(qtbot) -> None:
    results: list[object] = []
    gui_thread = QApplication.instance().thread()

    def work() -> str:
        assert QThread.currentThread() is not gui_thread
        return "done"

    run_in_pool(work, lambda r: results.append((r, QThread.currentThread() is gui_thread)))
    run_in_pool(lambda: 1 / 0, lambda _r: None, lambda e: results.append(type(e).__name__))
    qtbot.waitUntil(lambda: len(results) == 2, timeout=5000)
    assert ("done", True) in results and "ZeroDivisionError" in results


def _telemetry_from_recordings() -> Telemetry:
    """The three recorded payloads of a real vLLM CPU server, 2 s apart, with a gap between."""
    now = [1000.0]
    tel = Telemetry(clock=lambda: now[0])
    texts = [(METRICS / f"metrics_{n}.txt").read_text() for n in ("before", "during", "after")]
    t = 940.0
    for i, text in enumerate(texts):
        tel.add_vllm_sample(parse_metrics(text, t))
        t += 2.0
        if i == 1:
            tel.add_scrape_error(t, ScrapeError(ScrapeErrorKind.CONNECT, "refused"))
            t += 2.0
    now[0] = t
    return tel


def test_dashboard_draws_recorded_metrics_with_gaps(qtbot) -> None:
    tel = _telemetry_from_recordings()
    dash = DashboardPanel(tel, clock=tel._clock)
    qtbot.addWidget(dash)
    dash.timer.stop()
    dash.set_window_minutes(1)
    dash.redraw()
    assert dash.point_count("queue") >= 6  # running + waiting, three samples each
    assert dash.point_count("kv") == 3
    ((_, kv_item),) = dash._curves["kv"]
    x, y = kv_item.xData, kv_item.yData
    assert np.isnan(y).sum() == 1  # the failed scrape is a gap, never a zero
    assert all(-1.0 <= v <= 0.0 for v in x)  # minutes before now
    assert "KV" in dash.summary.text()
    # a longer window keeps the same points; unknown GPU series stay empty, not zero
    dash.set_window_minutes(60)
    assert dash.point_count("kv") == 3
    assert dash.point_count("vram") == 0
    assert dash.last_redraw_s < 0.5


def test_log_view_is_bounded_and_filters(qtbot) -> None:
    view = LogView(max_lines=100)
    qtbot.addWidget(view)
    for i in range(250):
        view.append("WARNING" if i % 10 == 0 else "INFO", f"line {i}")
    assert view.line_count() == 100
    assert view.text.document().blockCount() <= 100
    view.level.setCurrentIndex(2)
    shown = view.visible_text().splitlines()
    assert shown == [f"line {i}" for i in range(150, 250, 10)]
    view.level.setCurrentIndex(0)
    view.search.setText("line 24")
    assert view.visible_text().splitlines() == [f"line {i}" for i in range(240, 250)]


def test_banner_buttons_carry_their_option(qtbot) -> None:
    banner = FallbackBanner()
    qtbot.addWidget(banner)
    opts = [object(), object()]
    banner.show_failure(
        "32,768-token context needs 1.75 GiB of KV cache, 0.90 GiB is available.",
        [
            FallbackChoice("context 16,384 — fits 4 users", "shorter context", opts[0]),
            FallbackChoice("fp8 KV — 32k fits 4 users", "fp8", opts[1]),
        ],
    )
    assert banner.isVisible()
    assert banner.option_buttons[0].text().startswith("context 16,384")
    with qtbot.waitSignal(banner.option_chosen) as sig:
        banner.option_buttons[1].click()
    assert sig.args == [opts[1]]
    assert not any(b.isEnabled() for b in banner.option_buttons)  # no double relaunch


def test_a_borderline_plan_is_marked_and_launchable(qtbot) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fitkit import fixture_spec, rtx4090

    from kvpilot.core.fit.budget import compute_capacity
    from kvpilot.gui.panels.planner_panel import PlannerPanel
    from kvpilot.gui.records import PlanRow

    model = fixture_spec("qwen2.5-7b-instruct", 15_231_233_024)
    inputs = rtx4090(model, max_model_len=32768, max_num_seqs=1, gpu_memory_utilization=0.7)
    cap = compute_capacity(inputs)
    assert cap.verdict == "borderline"
    row = PlanRow(title="Qwen/Qwen2.5-7B-Instruct", quantization="", inputs=inputs,
                  capacity=cap, fits=False, reason="borderline: ...", model_ref="q")
    refused = PlanRow(title="x", quantization="", inputs=None, capacity=None, fits=False,
                      reason="does not fit", model_ref="x")
    assert row.borderline and row.launchable and not refused.launchable
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.set_plans([row, refused], "plans")
    assert panel.table.item(0, 0).text() == "≈" and panel.table.item(1, 0).text() == "✗"
    with qtbot.waitSignal(panel.launch_requested, timeout=2_000) as got:
        panel._on_double_click(0, 0)
    assert got.args == [row]
    panel.table.selectRow(0)
    detail = {panel.detail.item(r, 0).text(): panel.detail.item(r, 3).text()
              for r in range(panel.detail.rowCount()) if panel.detail.item(r, 0) is not None}
    low, high = (b / (1 << 30) for b in cap.available_kv_band_bytes)
    assert detail["verdict"].startswith(f"borderline: vLLM's KV memory {low:.2f} to {high:.2f}")


def test_drain_delivers_results_of_tasks_started_by_results(qtbot) -> None:
    from kvpilot.gui.workers import drain

    seen: list[str] = []

    def first_done(value: str) -> None:
        seen.append(value)
        run_in_pool(lambda: "second", seen.append)

    run_in_pool(lambda: "first", first_done)
    assert drain(10_000)
    assert seen == ["first", "second"]
