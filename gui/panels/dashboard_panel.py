"""Live dashboard: pyqtgraph plots redrawn by ONE timer from the telemetry ring buffers.

Producers (metrics and hardware samplers) write into :class:`kvpilot.core.telemetry.live.Telemetry`
on their threads; this panel only reads it, on a single ``QTimer`` at 5 Hz and only while it is
visible, with ``setData`` on pre-created curves (NaN = gap, ``clipToView`` and peak downsampling
to about one min/max pair per pixel). A frame of that timer is spread over short event-loop turns,
one plot each, :data:`TURN_MS` apart, so the plot repainted after each turn is one of nine and no
turn holds the GUI thread for all of them; a curve whose series has no new row and whose x axis
has not moved by a whole pixel since it was last set is left as it is (the same picture).
Paint cost is kept low on purpose (software rendering while vLLM uses every core): opaque grid
lines and 1 px curves; see benchmarks/gui_event_loop.py.
The x axis is minutes relative to now (0 = the newest sample). Power, temperature and SM clock
share that axis with the vLLM plots; while a reason that slows the card is set (NVML's
clock-event mask: power cap, thermal, hardware slowdown) the power and clock plots show a filled
"throttled" band under the curve, and the summary line names the reasons.

Signals:
    fix_requested(str): the user clicked the fix of a pressure signal (its ``kind``).
    benchmark_requested(): the user wants a load test of the running server.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QButtonGroup,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.throttle import throttle_text
from kvpilot.core.base.units import GiB
from kvpilot.gui import format as fmt
from kvpilot.gui import theme
from kvpilot.gui.widgets.layouts import column_layout
from kvpilot.gui.widgets.small import push_button

if TYPE_CHECKING:
    from kvpilot.core.telemetry.live import Telemetry

WINDOWS_MIN: tuple[int, ...] = (1, 5, 15, 60)
NO_SERVER = "No server running: the plots fill once vLLM is up."
NO_SERVER_YET = "No vLLM metrics yet"
REDRAW_HZ = 5.0

#: pressure kinds that have a one-click fix, and the button text
FIXABLE: dict[str, str] = {
    "kv_full": "Apply fp8 KV",
    "preemptions": "One user fewer",
    "vram_full": "Lower utilization",
    "desktop_headroom": "Lower utilization",
}


@dataclass(frozen=True)
class CurveSpec:
    """One curve: telemetry series name, legend label, scale applied to the values.

    ``only_where`` names a 0/1 telemetry series (``throttled``): the curve then shows
    ``series`` only where that one is 1 (NaN elsewhere), as a band filled down to zero under
    the plot's other curves.
    """

    series: str
    label: str
    scale: float = 1.0
    only_where: str | None = None


@dataclass(frozen=True)
class PlotSpec:
    """One plot of the dashboard."""

    key: str
    title: str
    unit: str
    curves: tuple[CurveSpec, ...]
    y_min: float | None = 0.0
    y_max: float | None = None


GIB = float(GiB)

PLOTS: tuple[PlotSpec, ...] = (
    PlotSpec(
        "vram",
        "VRAM",
        "GiB",
        (
            CurveSpec("memory_used_bytes", "total used", 1 / GIB),
            CurveSpec("vllm_memory_bytes", "vLLM", 1 / GIB),
        ),
    ),
    PlotSpec("kv", "KV cache", "%", (CurveSpec("kv_usage_frac", "KV used", 100.0),), 0.0, 100.0),
    PlotSpec("tokens", "Generation", "tokens/s", (CurveSpec("generation_tokens_per_s", "gen"),)),
    PlotSpec(
        "queue",
        "Requests",
        "requests",
        (CurveSpec("running", "running"), CurveSpec("waiting", "waiting")),
    ),
    PlotSpec(
        "ttft",
        "Time to first token",
        "s",
        (CurveSpec("ttft_p50_s", "P50"), CurveSpec("ttft_p99_s", "P99")),
    ),
    PlotSpec(
        "tpot",
        "Time per output token",
        "ms",
        (CurveSpec("tpot_p50_s", "P50", 1000.0), CurveSpec("tpot_p99_s", "P99", 1000.0)),
    ),
    PlotSpec(
        "power",
        "GPU power",
        "W",
        (
            CurveSpec("power_w", "draw"),
            CurveSpec("power_limit_w", "limit"),
            CurveSpec("power_w", "throttled", only_where="throttled"),
        ),
    ),
    PlotSpec("temperature", "GPU temperature", "°C", (CurveSpec("temperature_c", "GPU"),)),
    PlotSpec(
        "clock",
        "SM clock",
        "MHz",
        (
            CurveSpec("sm_clock_mhz", "SM"),
            CurveSpec("sm_clock_mhz", "throttled", only_where="throttled"),
        ),
    ),
)

#: milliseconds from one turn of a frame to the next: the nine plots' turns fit in one period
TURN_MS = int(1000 / REDRAW_HZ / len(PLOTS))
#: the shortest pause between two turns of a late frame (the plot just set is painted in it)
MIN_PAUSE_MS = 5


class DashboardPanel(QWidget):
    """Nine live plots, a window selector, a one-line summary and the pressure signals."""

    fix_requested = Signal(str)
    benchmark_requested = Signal()

    def __init__(
        self,
        telemetry: Telemetry,
        parent: QWidget | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(parent)
        self.telemetry = telemetry
        self._clock = clock
        self.window_s = 5 * 60.0
        self.frames = 0
        self.last_redraw_s = 0.0
        self.last_turn_s = 0.0
        self._curves: dict[str, list[tuple[CurveSpec, pg.PlotDataItem]]] = {}
        # what each curve was last set from (see _stamp); the timer's turns skip a curve whose
        # stamp has not changed
        self._stamps: dict[pg.PlotDataItem, tuple[float, ...]] = {}
        self._next_plot = 0  # round-robin position of the timer's turns over self._curves
        self._turns_left = 0  # turns of the current frame still to run
        self._frame_started_s = 0.0  # time.monotonic() at the frame's start
        self.plots: dict[str, pg.PlotItem] = {}

        self.summary = QLabel(NO_SERVER)
        self.summary.setObjectName("dashboardSummary")
        self.summary.setWordWrap(True)  # the GPU part can be long; never widen the window
        win_row = QHBoxLayout()
        win_row.addWidget(self.summary, 1)
        win_row.addWidget(QLabel("window"))
        self.window_buttons = QButtonGroup(self)
        for minutes in WINDOWS_MIN:
            b = QPushButton(f"{minutes}m")
            b.setCheckable(True)
            b.setFixedWidth(44)
            b.setChecked(minutes * 60.0 == self.window_s)
            self.window_buttons.addButton(b, minutes)
            win_row.addWidget(b)
        self.window_buttons.idClicked.connect(self.set_window_minutes)
        self.benchmark_button = push_button(
            "Benchmark…", name="benchmarkButton",
            tooltip="Run a load test against the running server",
            on_click=self.benchmark_requested.emit,
        )
        win_row.addWidget(self.benchmark_button)

        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.setBackground("w")
        # the plots are made when first needed (shown, redrawn or asked for their points),
        # not while the app starts with another tab in front
        self._plots_built = False

        self.pressure_box = QVBoxLayout()
        self.pressure_box.setSpacing(2)
        self._pressure_widgets: list[QWidget] = []
        self._pressure_kinds: tuple[str, ...] = ()

        column_layout(self, win_row, (self.graphics, 1), self.pressure_box, margins_px=4)

        self.timer = QTimer(self)
        self.timer.setObjectName("dashboard-redraw")
        self.timer.setInterval(int(1000 / REDRAW_HZ))
        self.timer.timeout.connect(self._on_timer)
        self.timer.start()
        self._turn_timer = QTimer(self)
        self._turn_timer.setObjectName("dashboard-redraw-turn")
        self._turn_timer.setSingleShot(True)
        self._turn_timer.timeout.connect(self._on_turn_timer)

    # ----------------------------------------------------------------- building

    def _ensure_plots(self) -> None:
        if not self._plots_built:
            self._plots_built = True
            self._build_plots()

    def _build_plots(self) -> None:
        grid_cols = 3
        for i, spec in enumerate(PLOTS):
            plot = self.graphics.addPlot(row=i // grid_cols, col=i % grid_cols)
            plot.setTitle(f"{spec.title} ({spec.unit})", size="9pt", color=theme.PLOT_TEXT)
            _opaque_grid(plot)
            plot.setClipToView(True)
            plot.setDownsampling(ds=1, auto=False, mode="peak")  # set per frame: _downsample
            plot.setMouseEnabled(x=False, y=False)
            plot.hideButtons()
            plot.setLabel("bottom", "minutes")
            if len(spec.curves) > 1:
                plot.addLegend(offset=(5, 5), labelTextSize="8pt",
                               labelTextColor=theme.PLOT_TEXT, brush=theme.PLOT_LEGEND_FILL)
            if spec.y_max is not None:
                plot.setYRange(spec.y_min or 0.0, spec.y_max, padding=0.02)
            else:
                plot.enableAutoRange(axis="y")
            curves = []
            for j, c in enumerate(spec.curves):
                # 1 px: a wider line goes through Qt's slow path stroker (twice the paint time)
                if c.only_where is not None:
                    item = plot.plot(
                        [], [], pen=pg.mkPen(theme.THROTTLED, width=1), name=c.label,
                        connect="finite", fillLevel=0.0, brush=pg.mkBrush(theme.THROTTLED_FILL),
                    )
                    item.setZValue(-1)  # under the curves it marks; opaque fill: cheap paint
                else:
                    pen = pg.mkPen(theme.PLOT_COLORS[j % len(theme.PLOT_COLORS)], width=1)
                    item = plot.plot([], [], pen=pen, name=c.label, connect="finite")
                curves.append((c, item))
            self._curves[spec.key] = curves
            self.plots[spec.key] = plot
            self._set_x_range(plot)

    def _set_x_range(self, plot: pg.PlotItem) -> None:
        plot.setXRange(-self.window_s / 60.0, 0.0, padding=0.0)

    # ----------------------------------------------------------------- inputs

    def set_window_minutes(self, minutes: int) -> None:
        """Show the last ``minutes`` minutes (1, 5, 15 or 60)."""
        self.window_s = minutes * 60.0
        self._ensure_plots()
        button = self.window_buttons.button(minutes)
        if button is not None:
            button.setChecked(True)
        for plot in self.plots.values():
            self._set_x_range(plot)
        self.redraw()

    # ----------------------------------------------------------------- the one redraw

    def _on_timer(self) -> None:
        """Start a frame: the summary now, then one plot per turn, :data:`TURN_MS` apart.

        A hidden dashboard (another tab, a minimized window) is not redrawn; it catches up the
        moment it is shown again (showEvent). A frame still running when the next one starts
        goes on from where it was, so every plot comes up once per frame period.
        """
        if not self.isVisible():
            return
        self._ensure_plots()
        self._update_summary()
        self.frames += 1
        self._turns_left = len(self._curves)
        self._frame_started_s = time.monotonic()
        self.last_redraw_s = 0.0
        self._turn()

    def _on_turn_timer(self) -> None:
        # the frame's remaining turns end with the timer (the window closing) or when hidden
        if self.timer.isActive() and self.isVisible():
            self._turn()
        else:
            self._turns_left = 0

    def _turn(self) -> None:
        """Bring the next plot (round robin) that is out of date up to date; plots that are
        not are passed over in the same turn, and each one passed counts as one of the
        frame's turns."""
        started = time.perf_counter()
        keys = list(self._curves)
        while self._turns_left > 0:
            key = keys[self._next_plot % len(keys)]
            self._next_plot = (self._next_plot + 1) % len(keys)
            self._turns_left -= 1
            if self._draw_plot(key, self._clock(), force=False):
                break
        self.last_turn_s = time.perf_counter() - started
        self.last_redraw_s += self.last_turn_s
        if self._turns_left > 0:
            # on the frame's schedule (turn k at k * TURN_MS), however long the turns took;
            # a late frame catches up with shorter pauses, each still long enough for a paint
            turn = len(self._curves) - self._turns_left
            due_s = self._frame_started_s + turn * TURN_MS / 1000 - time.monotonic()
            self._turn_timer.start(max(MIN_PAUSE_MS, int(due_s * 1000)))

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        self.redraw()

    def redraw(self) -> None:
        """Copy the visible window of every series into its curve, all of them now.

        The timer spreads this work over several turns (:meth:`_on_timer`); this call does it
        in one go, so every curve is up to date when it returns.
        """
        started = time.perf_counter()
        self._ensure_plots()
        now = self._clock()
        for key in self._curves:
            self._draw_plot(key, now, force=True)
        self._update_summary()
        self.frames += 1
        self.last_redraw_s = time.perf_counter() - started

    def _draw_plot(self, key: str, now: float, *, force: bool) -> int:
        """Set the curves of plot ``key`` from the window ending at ``now`` (monotonic s);
        without ``force`` only those whose stamp changed. Returns how many were set."""
        changed = 0
        for spec, item in self._curves[key]:
            t, y = self.telemetry.series(spec.series, self.window_s, now_s=now)
            stamp = self._stamp(item, t, now)
            if not force and self._stamps.get(item) == stamp:
                continue
            self._stamps[item] = stamp
            changed += 1
            if t.size == 0:
                item.setData([], [])
                continue
            x = (t - now) / 60.0
            if spec.scale != 1.0:
                y = y * spec.scale
            if spec.only_where is not None:
                y = _only_where(y, self.telemetry.series(spec.only_where, self.window_s,
                                                         now_s=now)[1])
            self._downsample(item, t.size)
            item.setData(x, y, connect="finite")
        return changed

    def _stamp(self, item: pg.PlotDataItem, t: np.ndarray, now: float) -> tuple[float, ...]:
        """What the picture of ``item`` depends on: the window's rows (count, first and last
        time: rows are only ever appended) and the pixel of the plot's width that ``now``
        falls in (the curve moves left one pixel per window/width seconds; a smaller move
        changes no pixel)."""
        if t.size == 0:
            return (0.0, self.window_s)
        width_px = _width_px(item)
        pixel = math.floor(now * width_px / self.window_s)
        return (float(t.size), float(t[0]), float(t[-1]), self.window_s, width_px, pixel)

    def _downsample(self, item: pg.PlotDataItem, points: int) -> None:
        """Peak-downsample ``item`` to about one min/max pair per pixel of its plot's width
        (pyqtgraph's automatic choice keeps about ten points per pixel, each drawn)."""
        width_px = _width_px(item)
        factor = max(1, -(-points // width_px))  # ceil: at most width_px bins
        if item.opts.get("downsample") != factor:
            item.setDownsampling(ds=factor, auto=False, method="peak")

    def point_count(self, key: str) -> int:
        """Finite points handed to plot ``key`` (all its curves, before downsampling)."""
        total = 0
        self._ensure_plots()
        for _, item in self._curves[key]:
            y = item.yData
            if y is not None:
                total += int(np.count_nonzero(np.isfinite(y)))
        return total

    def _update_summary(self) -> None:
        latest = self.telemetry.latest()
        v = latest.values
        if latest.t_monotonic_s is None:  # no vLLM yet; the GPU may already be sampled
            gpu = _gpu_parts(v)
            if gpu:
                self.summary.setText(" · ".join([NO_SERVER_YET, *gpu]))
            return
        if latest.status_message:
            self.summary.setText(latest.status_message)
        else:
            parts = [
                f"KV {fmt.percent(v.get('kv_usage_frac'))}",
                f"gen {fmt.rate(v.get('generation_tokens_per_s'))}",
                f"running {_int(v.get('running'))} · waiting {_int(v.get('waiting'))}",
                _pair("TTFT", v.get("ttft_p50_s"), v.get("ttft_p99_s")),
                _pair("TPOT", v.get("tpot_p50_s"), v.get("tpot_p99_s")),
            ]
            parts.extend(_gpu_parts(v))
            self.summary.setText(" · ".join(parts))
        self._show_pressure(latest.pressure)

    def _show_pressure(self, signals: tuple[Any, ...]) -> None:
        kinds = tuple(s.kind for s in signals)
        if kinds == self._pressure_kinds:
            for w, s in zip(self._pressure_widgets, signals, strict=False):
                label = w.findChild(QLabel)
                if label is not None:
                    label.setText(f"⚠ {s.message}: {s.fix}")
            return
        self._pressure_kinds = kinds
        for w in self._pressure_widgets:
            w.setParent(None)
            w.deleteLater()
        self._pressure_widgets = []
        for s in signals:
            row = QWidget()
            row.setObjectName(f"pressure-{s.kind}")
            h = QHBoxLayout(row)
            h.setContentsMargins(0, 0, 0, 0)
            label = QLabel(f"⚠ {s.message}: {s.fix}")
            label.setStyleSheet(f"color: {theme.TIGHT}")
            label.setWordWrap(True)
            h.addWidget(label, 1)
            if s.kind in FIXABLE:
                b = QPushButton(FIXABLE[s.kind])
                b.clicked.connect(lambda _=False, k=s.kind: self.fix_requested.emit(k))
                h.addWidget(b)
            self.pressure_box.addWidget(row)
            self._pressure_widgets.append(row)


def _opaque_grid(plot: pg.PlotItem) -> None:
    """Grid lines in one opaque light colour, under the curves and legends (axis text in the
    plot text colour): ``showGrid(alpha=…)`` draws translucent lines
    that the software rasterizer blends pixel by pixel, which made each paint of the six plots
    take 25-45 ms (benchmarks/gui_event_loop.py); opaque lines take about a quarter of that."""
    plot.showGrid(x=True, y=True, alpha=1.0)
    for name in ("left", "bottom"):
        axis = plot.getAxis(name)
        axis.setStyle(tickAlpha=255)
        axis.setTickPen(pg.mkPen(theme.PLOT_GRID))
        axis.setTextPen(pg.mkPen(theme.PLOT_TEXT))
        # the grid under the curves and the legend: the axes draw the grid and sat above the
        # view box, which holds the curves and the legend, so grid lines ran through the
        # legend's words
        axis.setZValue(plot.vb.zValue() - 1)


def _width_px(item: pg.PlotDataItem) -> int:
    """Width in pixels of the plot ``item`` is drawn in (1 before it is laid out)."""
    view = item.getViewBox()
    return max(1, int(view.width())) if view is not None else 1


def _only_where(y: np.ndarray, flag: np.ndarray) -> np.ndarray:
    """``y`` where ``flag`` is 1, NaN elsewhere (both from one ring, so the same length)."""
    if flag.shape != y.shape:  # a sample arrived between the two reads: keep what matches
        n = min(flag.size, y.size)
        y, flag = y[:n], flag[:n]
    return np.where(flag > 0.5, y, np.nan)


def _gpu_parts(v: Mapping[str, float | None]) -> list[str]:
    """Summary words for power, temperature and the throttle state (nothing when no GPU)."""
    out: list[str] = []
    power, limit = v.get("power_w"), v.get("power_limit_w")
    if power is not None:
        out.append(f"{power:.0f} W" + ("" if limit is None else f" of {limit:.0f} W"))
    temp = v.get("temperature_c")
    if temp is not None:
        out.append(f"{temp:.0f} °C")
    mask = v.get("throttle_reasons_mask")
    if mask is not None:
        out.append(throttle_text(int(mask)))
    return out


def _int(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f}"


def _pair(name: str, p50: float | None, p99: float | None) -> str:
    return f"{name} P50 {fmt.latency(p50)} P99 {fmt.latency(p99)}"
