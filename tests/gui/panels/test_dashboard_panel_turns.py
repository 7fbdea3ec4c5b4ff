"""The dashboard's timer frame: one plot per short turn, unchanged curves left alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from testpaths import DATA

from kvpilot.core.telemetry.live import Telemetry
from kvpilot.core.vllm.metrics import MetricsSample, parse_metrics
from kvpilot.gui.panels.dashboard_panel import PLOTS, REDRAW_HZ, TURN_MS, DashboardPanel

PAYLOAD = DATA / "metrics" / "metrics_during.txt"


class Feed:
    """A telemetry fed by hand: the recorded /metrics payload of a real vLLM CPU server and
    the recorded RTX 4090 (NVML replay), one row of each per ``add`` at the test's clock."""

    def __init__(self) -> None:
        from fakes import pynvml_stub

        from kvpilot.core.hardware.sampler import GpuSampler

        self.now = 5000.0
        self.tel = Telemetry(clock=lambda: self.now)
        self.base: MetricsSample = parse_metrics(PAYLOAD.read_text(), 0.0)
        self.sampler = GpuSampler(nvml_module=pynvml_stub.load("rtx4090-desktop"))
        self.rows = 0

    def add(self, seconds_later: float = 1.0) -> None:
        self.now += seconds_later
        self.rows += 1
        self.tel.add_vllm_sample(
            replace(self.base, t_monotonic_s=self.now, running=float(self.rows % 4))
        )
        gpu = self.sampler.sample_once()
        self.tel.add_gpu_sample(replace(gpu, t_monotonic_s=self.now))

    def close(self) -> None:
        self.sampler.close()


@pytest.fixture
def feed():
    f = Feed()
    for _ in range(30):
        f.add()
    yield f
    f.close()


def _shown(qtbot, feed: Feed) -> tuple[DashboardPanel, list[object]]:
    """A shown dashboard whose frame timer runs but never fires during the test (its turns
    are driven by hand), and the list every curve's ``setData`` appends the curve to."""
    dash = DashboardPanel(feed.tel, clock=lambda: feed.now)
    qtbot.addWidget(dash)
    dash.timer.setInterval(3_600_000)
    dash.resize(1200, 600)
    dash.show()
    qtbot.waitExposed(dash)
    dash.set_window_minutes(1)
    calls: list[object] = []
    for curves in dash._curves.values():
        for _, item in curves:
            item.sigPlotChanged.connect(calls.append)
    return dash, calls


def _run_frame(dash: DashboardPanel, calls: list[object]) -> list[int]:
    """One timer frame, its turns run by hand; the curves set in each turn."""
    per_turn = []
    before = len(calls)
    dash._on_timer()
    per_turn.append(len(calls) - before)
    while dash._turns_left > 0:
        before = len(calls)
        assert dash._turn_timer.isActive()  # the next turn is a later event-loop turn
        dash._on_turn_timer()
        per_turn.append(len(calls) - before)
    return per_turn


def _shows_newest(dash: DashboardPanel, feed: Feed) -> bool:
    for curves in dash._curves.values():
        for spec, item in curves:
            t, _ = feed.tel.series(spec.series, dash.window_s, now_s=feed.now)
            if t.size and (item.xData is None or item.xData.size != t.size):
                return False
    return True


def test_a_frame_sets_one_plot_per_turn_and_all_plots_within_the_frame(qtbot, feed) -> None:
    dash, calls = _shown(qtbot, feed)
    feed.add()  # one new row for every series and the x axis a second further on
    assert not _shows_newest(dash, feed)
    per_turn = _run_frame(dash, calls)
    assert len(per_turn) <= len(PLOTS)
    most = max(len(p.curves) for p in PLOTS)
    assert all(n <= most for n in per_turn), per_turn  # one plot's curves per turn at most
    assert sum(per_turn) == sum(len(p.curves) for p in PLOTS)  # and every curve once
    assert _shows_newest(dash, feed)
    ((_, kv),) = dash._curves["kv"]
    assert kv.xData[-1] == 0.0  # the newest row at "now"
    # the turns, TURN_MS apart, end within one frame period
    assert TURN_MS * (len(PLOTS) - 1) < 1000 / REDRAW_HZ


def _pixel(dash: DashboardPanel, key: str, now: float) -> int:
    """The pixel of plot ``key``'s width that ``now`` falls in (window/width seconds each)."""
    width_px = int(dash.plots[key].getViewBox().width())
    return int(np.floor(now * width_px / dash.window_s))


def test_unchanged_series_are_not_set_again_until_a_row_or_a_pixel_comes(qtbot, feed) -> None:
    dash, calls = _shown(qtbot, feed)
    _run_frame(dash, calls)
    calls.clear()
    assert sum(_run_frame(dash, calls)) == 0  # nothing new, the clock still: the same picture
    with_points = {
        key: {item for _, item in curves if item.xData is not None and item.xData.size}
        for key, curves in dash._curves.items()
    }
    narrowest_px = min(int(p.getViewBox().width()) for p in dash.plots.values())
    step_s = 0.3 * dash.window_s / narrowest_px  # under a third of a pixel in every plot
    skipped = moved = 0
    for _ in range(12):
        before = feed.now
        feed.now += step_s
        calls.clear()
        _run_frame(dash, calls)
        for key, items in with_points.items():
            if not items:
                continue
            if _pixel(dash, key, feed.now) != _pixel(dash, key, before):
                assert items <= set(calls), key  # a pixel further: the curves move left
                moved += 1
            else:
                assert not items & set(calls), key  # within the pixel: left as they are
                skipped += 1
    assert skipped > moved > 0
    before_kv = dash._curves["kv"][0][1].xData.copy()
    feed.add(0.0)  # a new row at the same instant: set again, one point more
    calls.clear()
    assert sum(_run_frame(dash, calls)) > 0
    assert dash._curves["kv"][0][1].xData.size == before_kv.size + 1


def test_redraw_still_sets_every_curve_at_once(qtbot, feed) -> None:
    dash, calls = _shown(qtbot, feed)
    calls.clear()
    frames = dash.frames
    dash.redraw()  # nothing changed, and still every curve is set, in this one call
    assert len(calls) == sum(len(p.curves) for p in PLOTS)
    assert dash.frames == frames + 1 and dash.last_redraw_s > 0
    feed.add()
    dash.redraw()
    assert _shows_newest(dash, feed)


def test_a_late_frame_goes_on_where_the_last_one_stopped(qtbot, feed) -> None:
    dash, calls = _shown(qtbot, feed)
    feed.add()
    dash._on_timer()
    dash._on_turn_timer()  # two plots of nine drawn, then the next frame comes
    drawn = set(calls)
    feed.add()
    calls.clear()
    dash._on_timer()
    first = set(calls)
    assert first and not first & drawn  # a plot the late frame had not reached comes first


def test_a_hidden_or_stopped_dashboard_drops_the_rest_of_its_frame(qtbot, feed) -> None:
    dash, calls = _shown(qtbot, feed)
    feed.add()
    dash._on_timer()
    dash.hide()
    calls.clear()
    dash._on_turn_timer()
    assert calls == [] and dash._turns_left == 0
    dash.show()  # caught up at once
    assert _shows_newest(dash, feed)
    feed.add()
    dash._on_timer()
    dash.timer.stop()  # the window closing
    calls.clear()
    dash._on_turn_timer()
    assert calls == [] and dash._turns_left == 0


def test_the_running_timers_bring_every_plot_up_to_date(qtbot, feed) -> None:
    dash, _ = _shown(qtbot, feed)
    dash.timer.setInterval(int(1000 / REDRAW_HZ))
    dash.timer.start()
    feed.add()
    qtbot.waitUntil(lambda: _shows_newest(dash, feed), timeout=10_000)
