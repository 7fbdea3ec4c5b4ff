"""How late the window's event loop runs through the three scenes of the event-loop fault tests.

The scenes are those of tests/faults/test_gui_event_loop.py, on the main window of a recorded
RTX 4090 (NVML replay), settings and data in a temporary folder:

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
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

GOAL_S = 0.050
TICK_S = 0.005


class Probe:
    """Ticks of a precise QTimer; the longest gap beyond the interval is the worst lateness."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.ticks: list[float] = []
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(lambda: self.ticks.append(time.perf_counter()))
        self.timer.start(int(TICK_S * 1000))

    def restart(self) -> None:
        self.ticks = [time.perf_counter()]

    def lateness_s(self) -> list[float]:
        return [b - a - TICK_S for a, b in zip(self.ticks, self.ticks[1:], strict=False)]

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
    from kvpilot.gui.bridge import CoreBridge
    from kvpilot.gui.services import AppServices

    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop")
    window = gui_app.build_window(services=services, confirm_stop=lambda: True)
    window.show()
    wait(30_000, lambda: gui_app.loaded(window))
    wait(300)  # the first plan's chart is drawn
    return window


def silent_server() -> tuple[str, Callable[[], None]]:
    """A TCP server that accepts and never sends a byte; returns (url, close)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    t = threading.Thread(target=accept, daemon=True)
    t.start()

    def close() -> None:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        sock.close()

    return f"http://127.0.0.1:{sock.getsockname()[1]}", close


def scene_hung_metrics(probe: Probe) -> list[float]:
    url, close = silent_server()
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
        close()
        dispose(w)


def scene_download(probe: Probe) -> list[float]:
    from kvpilot.core.app import launch
    from kvpilot.core.hub import download, download_errors
    from kvpilot.core.runtimes.discovery import VllmRuntime

    started, release = threading.Event(), threading.Event()

    def slow_download(spec, *, on_progress=None, cancel_event=None):  # noqa: ANN001, ANN202
        started.set()
        total = 1 << 30
        for i in range(2000):
            if release.is_set() or (cancel_event is not None and cancel_event.is_set()):
                break
            if on_progress is not None:
                on_progress(download.DownloadProgress(
                    "downloading", i << 19, total, i << 19, 5e8, 2.0, "model.safetensors", 0, 1))
            time.sleep(0.001)
        release.wait(20)
        raise download_errors.DownloadCancelled(f"download of {spec.model} cancelled")

    real = launch.launchable_spec
    launch.launchable_spec = slow_download
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
    from kvpilot.core.vllm import supervisor as sv

    w = make_window()
    try:
        w.services.supervisor = object()  # the window shows a running server's output
        sink = w.services._supervisor_event_sink()
        total = rate = 100_000

        def flood() -> None:
            t0 = time.monotonic()
            for i in range(total):
                sink(sv.LogLineEvent("stdout", "(APIServer pid=1) INFO 11-29 08:10:45 [x.py:1] "
                                               f"flood line {i:09d}", 0.0))
                if i % 1000 == 999:
                    ahead = t0 + (i + 1) / rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)

        t = threading.Thread(target=flood)
        probe.restart()
        t.start()
        wait(30_000, lambda: bool(w.log_view._lines)
             and "flood line 000099999" in w.log_view._lines[-1][1])
        t.join()
        lateness = probe.lateness_s()
        w.services.supervisor = None
        return lateness
    finally:
        dispose(w)


def dispose(window) -> None:  # noqa: ANN001
    from kvpilot.gui import app as gui_app
    from kvpilot.gui.workers import wait_for_pool

    window.services.shutdown()
    wait_for_pool(30_000)
    gui_app.dispose(window)


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
