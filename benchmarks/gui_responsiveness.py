"""How late the window's event loop runs through the three scenes of the event-loop fault tests.

The scenes are those of tests/faults/test_gui_event_loop.py, set up by the same helpers
(tests/faultkit.py; the window by tests/guikit.py), on the main window of a recorded RTX 4090
(NVML replay), settings and data in a temporary folder:

* ``hung-metrics``: a /metrics endpoint that accepts and never answers; the scrape is stopped
  and the window closed while the sampler thread waits in it (2 s timeout).
* ``download``: a model download before a launch, reporting progress every millisecond (a
  stand-in for kvpilot's Hub download in place of ``core.launch.launchable_spec``; it sends
  the progress reports the real one sends).
* ``log-flood``: 100,000 vLLM log lines in one second, sent as the supervisor sends them.

Measured on the GUI thread: the lateness of a 5 ms precise QTimer (how much later than 5 ms
after the previous tick each tick fires: what a user feels as lag). Goal: no tick later than
50 ms in any scene on an idle machine. The fault tests call only a block of 1 s a fault (they
must hold on a busy CI machine); this is where the 50 ms figure is kept.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/gui_responsiveness.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from faultkit import (  # the fault tests' scenes
    FLOOD_LAST,
    LoopProbe,
    flood_log,
    silent_server,
    slow_download,
)
from guikit import close_windows, open_window  # the GUI tests' window set-up

GOAL_S = 0.050
TICK_S = 0.005


class Probe:
    """A precise QTimer feeding the fault tests' :class:`faultkit.LoopProbe` its ticks."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.loop = LoopProbe(interval_s=TICK_S)
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self.loop.tick)
        self.timer.start(int(TICK_S * 1000))

    def restart(self) -> None:
        self.loop.ticks.clear()
        self.loop.tick()

    def lateness_s(self) -> list[float]:
        return self.loop.lateness_s()

    def stop(self) -> None:
        self.timer.stop()


def wait(ms: int, until: Callable[[], bool] | None = None) -> None:
    """Run the event loop for ``ms`` (or until ``until()`` holds)."""
    from PySide6.QtCore import QCoreApplication

    end = time.monotonic() + ms / 1000
    while time.monotonic() < end and not (until is not None and until()):
        QCoreApplication.processEvents()
        time.sleep(0.001)


def make_window():  # noqa: ANN201 - the MainWindow, imported late
    from kvpilot.gui import app as gui_app

    window = open_window("rtx4090-desktop")
    wait(30_000, lambda: gui_app.loaded(window))
    wait(300)  # the first plan's chart is drawn
    return window


def scene_hung_metrics(probe: Probe) -> list[float]:
    with silent_server() as url:
        w = make_window()
        try:
            w.services.start_metrics(url, 5.0)
            time.sleep(0.3)  # the sampler is inside a scrape that times out after 2 s
            probe.restart()
            w.services.stop_metrics()
            w._finish_close()
            wait(300)
            return probe.lateness_s()
        finally:
            w.services.join_background(10)
            dispose(w)


def scene_download(probe: Probe) -> list[float]:
    from kvpilot.core.app import launch
    from kvpilot.core.runtimes.discovery import VllmRuntime

    started, release = threading.Event(), threading.Event()
    real = launch.launchable_spec
    launch.launchable_spec = slow_download(started, release)
    w = make_window()
    try:
        w.runtime_control.set_runtime(VllmRuntime(("/bin/false",), "0.32.0", "env", "/bin/false"))
        wait(15_000, lambda: w.planner.selected() is not None)
        w.server_control.launch_selected()
        started.wait(5)
        probe.restart()
        wait(500)  # the progress reports arrive and are shown meanwhile
        lateness = probe.lateness_s()
        release.set()
        wait(10_000, lambda: w.server_panel.state == "failed")
        return lateness
    finally:
        launch.launchable_spec = real
        release.set()
        dispose(w)


def scene_log_flood(probe: Probe) -> list[float]:
    w = make_window()
    try:
        w.services.supervisor = object()  # the window shows a running server's output
        t = threading.Thread(target=flood_log, args=(w.services._supervisor_event_sink(),))
        probe.restart()
        t.start()
        wait(30_000, lambda: bool(w.log_view._lines) and FLOOD_LAST in w.log_view._lines[-1][1])
        t.join()
        lateness = probe.lateness_s()
        w.services.supervisor = None
        return lateness
    finally:
        dispose(w)


def dispose(window) -> None:  # noqa: ANN001
    close_windows([window])


SCENES = {
    "hung-metrics": scene_hung_metrics,
    "download": scene_download,
    "log-flood": scene_log_flood,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each scene (default 3)")
    args = ap.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    with tempfile.TemporaryDirectory(prefix="kvpilot-bench-") as tmp:
        for name in ("CONFIG", "DATA", "CACHE"):
            os.environ[f"KVPILOT_{name}_DIR"] = str(Path(tmp) / name.lower())
        os.environ.pop("KVPILOT_VLLM", None)
        os.environ["PATH"] = "/usr/bin:/bin"  # no vLLM: the download scene sets its own

        import numpy as np
        from PySide6.QtWidgets import QApplication

        import kvpilot.gui  # noqa: F401 - pins pyqtgraph to PySide6

        app = QApplication.instance() or QApplication([])
        probe = Probe()
        worst_all = 0.0
        print(f"event-loop lateness of a {TICK_S * 1000:.0f} ms precise timer, "
              f"{os.cpu_count()} CPUs, {args.repeat} runs per scene")
        for name, scene in SCENES.items():
            for run in range(1, args.repeat + 1):
                lat = np.array(scene(probe)) * 1000
                worst = float(lat.max()) if lat.size else 0.0
                worst_all = max(worst_all, worst)
                print(f"  {name:13s} run {run}: worst {worst:6.1f} ms, P99 "
                      f"{np.percentile(lat, 99) if lat.size else 0.0:6.1f} ms, "
                      f"{lat.size} ticks")
        probe.stop()
        ok = worst_all <= GOAL_S * 1000
        print(f"worst tick over all scenes: {worst_all:.1f} ms")
        print(f"goal worst <= {GOAL_S * 1000:.0f} ms: {'met' if ok else 'NOT met'}")
        del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
