"""The dashboard drawn from recorded /metrics payloads, gaps included."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from testpaths import DATA

from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig
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
    assert dash.last_redraw_s > 0  # timed for benchmarks/gui_event_loop.py, which prints it


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


def _telemetry_from_a_throttling_card(count: int = 12) -> Telemetry:
    """GPU samples of the recorded throttling 4090, 1 s apart; its mask is power cap x3,
    thermal x2, then thermal + power cap, and this test makes every other cycle idle."""
    from fakes import pynvml_stub

    from kvpilot.core.hardware.sampler import GpuSampler

    replay = pynvml_stub.load("throttling")
    replay.snapshot["devices"][0]["throttle_reasons"] = [1, 1, 1, 1, 1, 1, 4, 4, 4, 32, 32, 36]
    sampler = GpuSampler(nvml_module=replay)
    now = [2000.0]
    tel = Telemetry(clock=lambda: now[0])
    try:
        for i in range(count):
            sample = sampler.sample_once()
            tel.add_gpu_sample(replace(sample, t_monotonic_s=now[0] - count + 1 + i))
    finally:
        sampler.close()
    return tel


def test_power_temperature_clock_and_throttled_band(qtbot) -> None:
    tel = _telemetry_from_a_throttling_card()
    dash = DashboardPanel(tel, clock=tel._clock)
    qtbot.addWidget(dash)
    dash.timer.stop()
    dash.set_window_minutes(1)
    dash.redraw()
    curves = {spec.label: item for spec, item in dash._curves["power"]}
    assert set(curves) == {"draw", "limit", "throttled"}
    assert np.isfinite(curves["draw"].yData).sum() == 12
    assert set(curves["limit"].yData.tolist()) == {450.0}
    band = curves["throttled"].yData
    # idle for the first six seconds, then held by the power cap and the thermal limit
    assert np.isnan(band[:6]).all() and np.isfinite(band[6:]).all()
    np.testing.assert_allclose(band[6:], curves["draw"].yData[6:])
    assert curves["throttled"].opts["fillLevel"] == 0.0
    assert curves["throttled"].zValue() < curves["draw"].zValue()
    clock_band = {spec.label: item for spec, item in dash._curves["clock"]}["throttled"]
    assert np.isfinite(clock_band.yData).sum() == 6
    assert dash.point_count("temperature") == 12
    # same time axis as the vLLM plots: minutes before now
    assert all(-1.0 <= v <= 0.0 for v in curves["draw"].xData)
    assert dash.plots["power"].getViewBox().viewRange()[0] == dash.plots["kv"].getViewBox(
    ).viewRange()[0]
    text = dash.summary.text()
    assert text.startswith("No vLLM metrics yet") and "448 W of 450 W" in text
    assert "°C" in text and "throttled: power cap, thermal" in text


def test_idle_card_is_not_throttled_and_no_gpu_means_no_band(qtbot) -> None:
    tel = _telemetry_from_a_throttling_card(count=6)
    dash = DashboardPanel(tel, clock=tel._clock)
    qtbot.addWidget(dash)
    dash.timer.stop()
    dash.redraw()
    band = {spec.label: item for spec, item in dash._curves["power"]}["throttled"]
    assert np.isnan(band.yData).all()
    assert "not throttled" in dash.summary.text()
    empty = DashboardPanel(_telemetry_from_recordings(), clock=lambda: 1000.0)
    qtbot.addWidget(empty)
    empty.timer.stop()
    empty.redraw()
    assert empty.point_count("power") == 0 and "throttle" not in empty.summary.text()
