"""The dashboard drawn from recorded /metrics payloads, gaps included."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from testpaths import DATA

from kvpilot.core.telemetry import Telemetry, TelemetryConfig
from kvpilot.core.vllm.metrics import ScrapeError, ScrapeErrorKind, parse_metrics
from kvpilot.gui.panels.dashboard_panel import DashboardPanel

METRICS = DATA / "metrics"


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


def test_dashboard_keeps_paint_cheap_downsampled_opaque_and_idle_when_hidden(qtbot) -> None:
    now = [10_000.0]
    tel = Telemetry(TelemetryConfig(capacity=40_000), clock=lambda: now[0])
    base = parse_metrics((METRICS / "metrics_during.txt").read_text(), 0.0)
    for i in range(36_000):  # 60 minutes at 10 Hz
        tel.add_vllm_sample(replace(base, t_monotonic_s=now[0] - 3600 + i * 0.1, running=i % 5))
    dash = DashboardPanel(tel, clock=tel._clock)
    qtbot.addWidget(dash)
    dash.timer.stop()
    dash.resize(1400, 700)
    dash.set_window_minutes(60)
    dash.show()
    qtbot.waitExposed(dash)
    dash.redraw()
    plot = dash.plots["queue"]
    width_px = int(plot.getViewBox().width())
    for _, item in dash._curves["queue"]:
        assert item.xData.size == 36_000  # all the data is handed over ...
        drawn = item.curve.xData.size  # ... and drawn as about one min/max pair per pixel
        assert width_px <= drawn <= 2 * width_px + 2, (drawn, width_px)
        assert item.opts["pen"].widthF() == 1.0
    for name in ("left", "bottom"):
        grid = plot.getAxis(name)
        assert grid.grid == 255 and grid.style["tickAlpha"] == 255  # opaque grid lines
    frames = dash.frames
    dash._on_timer()
    assert dash.frames == frames + 1
    dash.hide()
    dash._on_timer()
    assert dash.frames == frames + 1  # hidden: no redraw
    dash.show()
    assert dash.frames == frames + 2  # shown again: caught up at once
