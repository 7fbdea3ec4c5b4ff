"""Soak: the real vLLM server, a low-rate load test, full telemetry and the GUI offscreen.

The app's own objects do the work: ``AppServices.start_server`` launches vLLM (the CPU engine in
``.venv-vllm`` with the tiny test model, built by tests/e2e/make_tiny_model.py), the main window
(offscreen) handles every supervisor event, starts the /metrics sampler once ready and redraws
the dashboard; NVML is a recorded RTX 4090 (``--fake-gpu``). The core load test runs at one
request at a time with a pause between runs, in a process of its own, as the traffic of a
user's clients comes from other programs (``--load-in-process``: on a thread of the app's
process, as the load-test dialog runs it).

Reported after the warm-up (the first ``--warmup-s`` seconds): kvpilot's RSS growth, the median
of the last minute's readings (one every 2 s) against the first minute's (a run shorter than
four minutes: of its last and first quarter; goal: flat within 5 %;
single readings swing by several MB within a minute, so the first and last reading, the maximum
and each minute's median and range are printed too), /metrics samples dropped (failed scrapes
and ticks the sampler had to skip; goal: none), event-loop lateness P99 of a 5 ms precise timer
on the GUI thread (goal <= 30 ms), open file descriptors and threads at the start and at the
end (goal: none more at the end: a transient worker gone by then is no leak), and the time of
each paint of the dashboard's plots (the longest block the GUI thread sees while vLLM is busy).

Exit status: 0 when every goal is met, 1 when one is missed (the line says which), 2 when the
server did not start.

    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/soak.py --minutes 30
    QT_QPA_PLATFORM=offscreen .venv/bin/python benchmarks/soak.py --minutes 2   # CI-sized
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import psutil

if TYPE_CHECKING:
    from kvpilot.core.vllm.client import LoadTestConfig

REPO = Path(__file__).resolve().parents[1]
GOAL_RSS_GROWTH = 0.05
GOAL_P99_S = 0.030
RSS_EVERY_S = 2.0
#: seconds between two load-test runs
LOAD_PAUSE_S = 2.0


class Lateness:
    """How late each tick of a periodic timer came, kept in fixed bins (0.05 ms up to 5 s).

    A list of every tick grows by 200 floats a second at 5 ms and would itself be the RSS
    growth the soak looks for (about 11 MB in 30 minutes); the bins are allocated and touched
    once, before the first RSS reading.
    """

    BIN_S = 0.000_05

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.bins = np.ones(int(5.0 / self.BIN_S) + 1, dtype=np.int64)  # touched: resident
        self.clear()

    def clear(self) -> None:
        self.bins.fill(0)
        self.max_s = 0.0
        self.last_s = 0.0

    def tick(self) -> None:
        now = time.perf_counter()
        if self.last_s:
            late = max(0.0, now - self.last_s - self.period_s)
            self.max_s = max(self.max_s, late)
            self.bins[min(int(late / self.BIN_S), len(self.bins) - 1)] += 1
        self.last_s = now

    def percentile_s(self, q: float) -> float:
        total = int(self.bins.sum())
        if total == 0:
            return 0.0
        index = int(np.searchsorted(np.cumsum(self.bins), q / 100 * total))
        return index * self.BIN_S


def heap_report(before: object, after: object, top: int = 12) -> str:
    """Where the traced Python heap grew between two tracemalloc snapshots."""
    stats = after.compare_to(before, "lineno")  # type: ignore[attr-defined]
    lines = [f"  {s.size_diff / 2**20:+7.2f} MB {s.count_diff:+8d} blocks  {s.traceback}"
             for s in stats[:top]]
    total = sum(s.size_diff for s in stats)
    return f"traced Python heap: {total / 2**20:+.2f} MB in all; largest changes:\n" + \
        "\n".join(lines)


def memory_breakdown() -> str:
    """Resident kinds from /proc/self/smaps_rollup (Linux), in MB."""
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return "n/a"
    fields = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[-1] == "kB":
            fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    keys = ("Rss", "Anonymous", "Shared_Clean", "Private_Clean", "Private_Dirty")
    return ", ".join(f"{k} {fields.get(k, 0):.1f}" for k in keys)


def mappings_rss() -> dict[str, float]:
    """Resident MB by kind of mapping (Linux /proc/self/smaps): the main heap, anonymous
    mappings (thread arenas, large allocations) and files; empty where that file is absent."""
    kinds: dict[str, float] = {}
    try:
        text = Path("/proc/self/smaps").read_text()
    except OSError:
        return kinds
    kind = "other"
    for line in text.splitlines():
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
            name = head[5] if len(head) > 5 else ""
            kind = "heap" if name == "[heap]" else "anonymous" if not name else (
                "stack" if name.startswith("[stack") else "files")
        elif head[0] == "Rss:":
            kinds[kind] = kinds.get(kind, 0.0) + int(head[1]) / 1024
    return kinds


def trimmed_rss(me: psutil.Process) -> int:
    """RSS after glibc returns its free heap pages to the system (malloc_trim, through the
    app's own :func:`kvpilot.core.app.heap.release_free_heap`); the same RSS where that call does
    not exist. The difference is memory freed but kept by malloc."""
    from kvpilot.core.app.heap import release_free_heap

    done = release_free_heap()
    return done.rss_after_bytes if done is not None else me.memory_info().rss


def load_config(base_url: str, model: str | None) -> LoadTestConfig:
    """The soak's load: one request at a time, 32 prompt and 16 output tokens, 4 a run."""
    from kvpilot.core.vllm.client import LoadTestConfig

    return LoadTestConfig(base_url=base_url, model=model, concurrency_levels=(1,),
                          prompt_tokens=32, output_tokens=16, requests_per_level=4,
                          duration_s=30.0, warmup_requests=0)


def load_loop(base_url: str, model: str) -> int:
    """The load in a process of its own: the core load test, a pause, again; prints ``ok`` or
    ``failed`` per run; ends when terminated or when its parent is gone."""
    from kvpilot.core.vllm.client import LoadTestError, run_load_test

    parent = os.getppid()
    cfg = load_config(base_url, model or None)
    while os.getppid() == parent:
        try:
            run_load_test(cfg)
            print("ok", flush=True)
        except LoadTestError:
            print("failed", flush=True)
        time.sleep(LOAD_PAUSE_S)
    return 0


def tiny_model(vllm: Path) -> Path:
    python = vllm.parent / "python"
    proc = subprocess.run(
        [str(python), str(REPO / "tests" / "e2e" / "make_tiny_model.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return Path(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="soak length after warm-up")
    parser.add_argument("--warmup-s", type=float, default=30.0)
    parser.add_argument("--vllm", type=Path, default=REPO / ".venv-vllm" / "bin" / "vllm")
    parser.add_argument("--rate-hz", type=float, default=2.0, help="telemetry sampling rate")
    parser.add_argument("--port", type=int, default=18500,
                        help="first port to try for the server (two soaks side by side)")
    parser.add_argument("--blocks-ms", type=float, default=50.0,
                        help="print where the GUI thread was when a tick is this late")
    parser.add_argument("--trace", action="store_true",
                        help="also trace Python allocations and print where the heap grew")
    parser.add_argument("--load-in-process", action="store_true",
                        help="run the load test on a thread of the app's process (as the "
                             "load-test dialog does) instead of in a process of its own")
    parser.add_argument("--load-loop", nargs=2, metavar=("URL", "MODEL"),
                        help=argparse.SUPPRESS)  # the child that sends the load
    args = parser.parse_args(argv)
    if args.load_loop:
        return load_loop(*args.load_loop)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    scratch = Path(tempfile.mkdtemp(prefix="kvpilot-soak-"))
    for name, sub in (("KVPILOT_DATA_DIR", "data"), ("KVPILOT_CACHE_DIR", "cache"),
                      ("KVPILOT_CONFIG_DIR", "config")):
        os.environ[name] = str(scratch / sub)

    from kvpilot.core.app import startup_gc

    startup_gc.hold_during_start()  # as `kvpilot gui` starts: settled at the first paint
    from PySide6.QtCore import QCoreApplication, Qt, QTimer

    import kvpilot.gui  # noqa: F401 - pins pyqtgraph to PySide6
    from kvpilot.core.app import settings as st
    from kvpilot.core.runtimes.discovery import discover
    from kvpilot.core.vllm.client import LoadTestError, run_load_test
    from kvpilot.core.vllm.command import LaunchSpec, find_free_port
    from kvpilot.gui import app as gui_app
    from kvpilot.gui.bridge import CoreBridge
    from kvpilot.gui.collector import GuiCollector
    from kvpilot.gui.first_paint import FirstPaint
    from kvpilot.gui.panels.dashboard_panel import pg  # pyqtgraph, on PySide6
    from kvpilot.gui.services import AppServices
    from kvpilot.gui.workers import run_in_thread, wait_for_pool

    full_collections: list[float] = []  # seconds each generation-2 collection took
    collection_started = [0.0]

    def time_full_collections(phase: str, info: dict[str, int]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            collection_started[0] = time.perf_counter()
        else:
            full_collections.append(time.perf_counter() - collection_started[0])

    gc.callbacks.append(time_full_collections)
    paints: list[float] = []
    original_paint = pg.GraphicsLayoutWidget.paintEvent

    def timed_paint(view: object, event: object) -> None:  # every paint of the plots
        started = time.perf_counter()
        original_paint(view, event)
        paints.append(time.perf_counter() - started)

    # before any window exists: Qt resolves a Python override once per class, at first use
    pg.GraphicsLayoutWidget.paintEvent = timed_paint  # type: ignore[method-assign]
    runtime = discover(str(args.vllm))
    model = tiny_model(args.vllm)
    app = gui_app.ensure_app()
    collector = GuiCollector(parent=app)  # as `kvpilot gui`: cycles freed on the GUI thread
    collector.start()
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop")
    window = gui_app.build_window(store=st.SettingsStore(scratch / "config"), services=services)
    FirstPaint(window, startup_gc.settle_after_start)
    window.settings = st.update_profile(
        window.settings, dataclasses.replace(window.profile, sampling_hz=args.rate_hz)
    )
    window.runtime_control.set_runtime(runtime)
    window.show()
    for sub in ("tmp", "cache", "config"):
        (scratch / "vllm" / sub).mkdir(parents=True, exist_ok=True)
    spec = LaunchSpec(
        model=str(model), port=find_free_port("127.0.0.1", args.port), max_model_len=1024,
        max_num_seqs=4, kv_cache_memory_bytes=64 << 20, enforce_eager=True, dtype="float32",
        hf_offline=True,
        extra_env={"TMPDIR": str(scratch / "vllm" / "tmp"),
                   "VLLM_CACHE_ROOT": str(scratch / "vllm" / "cache"),
                   "VLLM_CONFIG_ROOT": str(scratch / "vllm" / "config")},
    )
    window.server_control.started_by_us = True
    run_in_thread(lambda: services.start_server(runtime, spec), lambda _s: None,
                  lambda exc: print(f"soak: launch failed: {exc}", file=sys.stderr))

    def pump(seconds: float, until: object = None) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            QCoreApplication.processEvents()
            if callable(until) and until():
                return
            time.sleep(0.005)

    pump(300, lambda: services.supervisor is not None and services.supervisor.state in
         ("ready", "failed", "stopped"))
    sup = services.supervisor
    if sup is None or sup.state != "ready":
        print("soak: the server did not become ready", file=sys.stderr)
        services.shutdown()
        return 2
    startup_s = (sup.ready_monotonic_s or 0) - (sup._started_mono or 0)
    pump(10, lambda: services.metrics_sampler is not None)  # the window starts it once ready

    stop_load = threading.Event()
    hold = threading.Event()  # set: the loader pauses between two runs (and says so in idle)
    idle = threading.Event()
    load_runs = [0, 0]  # ok, failed
    load_child: subprocess.Popen[str] | None = None

    def load() -> None:
        cfg = load_config(sup.base_url, sup.model_name)
        while not stop_load.is_set():
            if hold.is_set():
                idle.set()
                stop_load.wait(0.05)
                continue
            idle.clear()
            try:
                run_load_test(cfg, cancel_event=stop_load)
                load_runs[0] += 1
            except LoadTestError:
                load_runs[1] += 1
            stop_load.wait(LOAD_PAUSE_S)

    def count_child_runs(child: subprocess.Popen[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            load_runs[0 if line.strip() == "ok" else 1] += 1

    def resources() -> tuple[int, int]:
        """Open fds and threads; with the load test in this process, between two of its runs
        (a run holds sockets and the resolver's worker thread for a moment): the same phase
        at the start and the end."""
        if args.load_in_process:
            hold.set()
            idle.wait(120)
        counts = me.num_fds(), me.num_threads()
        hold.clear()
        return counts

    if args.load_in_process:
        loader = threading.Thread(target=load, name="soak-load", daemon=True)
    else:  # the served traffic comes from another program, as a user's clients' does
        load_child = subprocess.Popen(
            [sys.executable, __file__, "--load-loop", sup.base_url, sup.model_name or ""],
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        loader = threading.Thread(target=count_child_runs, args=(load_child,),
                                  name="soak-load-count", daemon=True)
    loader.start()

    lateness = Lateness(0.005)
    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.timeout.connect(lateness.tick)
    timer.start(5)
    me = psutil.Process()
    blocks: dict[str, int] = {}
    main_id = threading.get_ident()

    def watchdog() -> None:
        # samples the GUI thread's stack while its timer is late: where the event loop blocks
        import traceback

        while not stop_load.is_set():
            time.sleep(args.blocks_ms / 2000)
            last = lateness.last_s
            late = last and time.perf_counter() - last > args.blocks_ms / 1000
            if measuring.is_set() and late:
                frame = sys._current_frames().get(main_id)
                if frame is not None:
                    # file:line and function only: reading the source lines would fill
                    # linecache with every file seen here (the soak's own RSS growth)
                    stack = traceback.StackSummary.extract(
                        traceback.walk_stack(frame), limit=6, lookup_lines=False
                    )
                    where = "\n".join(
                        f"  {f.filename}:{f.lineno} in {f.name}" for f in reversed(stack)
                    )
                    blocks[where] = blocks.get(where, 0) + 1

    measuring = threading.Event()  # the watchdog counts only the measured minutes
    threading.Thread(target=watchdog, name="soak-watchdog", daemon=True).start()
    window.tabs.setCurrentWidget(window.dashboard)  # the plots are on screen, as a user sees
    pump(args.warmup_s)
    fds0, threads0 = resources()  # may wait for a load run to end: before the clock starts
    if args.trace:
        import tracemalloc

        tracemalloc.start(8)
        heap0 = tracemalloc.take_snapshot()
    parts0 = memory_breakdown()
    maps0 = mappings_rss()
    rss0 = me.memory_info().rss
    lateness.clear()
    paints.clear()
    sampler = services.metrics_sampler
    ok0, failed0 = sampler.samples_ok, sampler.samples_failed
    skipped0 = sampler.samples_skipped
    t0 = time.monotonic()
    measuring.set()
    rss_samples = [rss0]
    end = t0 + args.minutes * 60
    while time.monotonic() < end:
        pump(min(RSS_EVERY_S, end - time.monotonic()))
        rss_samples.append(me.memory_info().rss)
    elapsed = time.monotonic() - t0
    measuring.clear()
    ok, failed = sampler.samples_ok - ok0, sampler.samples_failed - failed0
    skipped = sampler.samples_skipped - skipped0
    rss1 = me.memory_info().rss
    parts1 = memory_breakdown()
    maps1 = mappings_rss()
    heap = ""
    if args.trace:
        heap = heap_report(heap0, tracemalloc.take_snapshot())
        tracemalloc.stop()
    releaser = services.heap_releaser  # the app's own, once a minute (kvpilot.core.app.heap)
    released = None
    if releaser is not None:
        released = (releaser.releases, releaser.released_bytes, releaser.longest_s)
    rss_trimmed = trimmed_rss(me)
    fds1, threads1 = resources()  # the loader is still running, between two of its runs
    stop_load.set()
    if load_child is not None:
        load_child.terminate()
        load_child.wait(60)
    loader.join(60)
    expected = int(elapsed * args.rate_hz)
    state_at_end = sup.state
    timer.stop()
    services.shutdown()
    wait_for_pool(30_000)
    gui_app.dispose(window)
    del app

    growth = (rss1 - rss0) / rss0
    # RSS goes up and down by several MB within a minute (allocator arenas taken and given
    # back): the goal compares the median of the first and of the last minute, not two readings
    per_min = max(1, round(60 / RSS_EVERY_S))
    edge = max(1, min(per_min, len(rss_samples) // 4))  # a short run: its first and last quarter
    first_min = float(np.median(rss_samples[:edge]))
    last_min = float(np.median(rss_samples[-edge:]))
    baseline_growth = (last_min - first_min) / first_min
    p99 = lateness.percentile_s(99)
    dropped = failed + skipped
    misses = [
        name
        for name, met in (
            ("RSS growth", abs(baseline_growth) <= GOAL_RSS_GROWTH),
            ("samples dropped", dropped == 0),
            ("event-loop P99", p99 <= GOAL_P99_S),
            ("open fds", fds1 <= fds0),
            ("threads", threads1 <= threads0),
        )
        if not met
    ]
    where = "in this process" if args.load_in_process else "in its own process"
    print(f"soak: {elapsed / 60:.1f} min after a {args.warmup_s:.0f} s warm-up; server start "
          f"{startup_s:.0f} s; state at the end: {state_at_end}; load runs ({where}) "
          f"{load_runs[0]} ok, {load_runs[1]} failed")
    print(f"RSS, median of the first and the last {edge * RSS_EVERY_S:.0f} s: "
          f"{first_min / 2**20:.1f} MB -> "
          f"{last_min / 2**20:.1f} MB ({baseline_growth * 100:+.1f} %)  goal: within "
          f"{GOAL_RSS_GROWTH * 100:.0f} %")
    print(f"  first and last reading: {rss0 / 2**20:.1f} MB -> {rss1 / 2**20:.1f} MB "
          f"({growth * 100:+.1f} %); max {max(rss_samples) / 2**20:.1f} MB")
    minutes = [rss_samples[i:i + per_min] for i in range(0, len(rss_samples), per_min)]
    print("  RSS each minute, median (range) in MB: " + " ".join(
        f"{np.median(m) / 2**20:.0f}({(max(m) - min(m)) / 2**20:.0f})" for m in minutes))
    print(f"/metrics samples: {ok} ok, {failed} failed, {skipped} skipped (of ~{expected} "
          f"expected at {args.rate_hz:g} Hz)  goal: none dropped")
    print(f"  resident at the start: {parts0}\n  resident at the end:   {parts1}\n"
          f"  after malloc_trim: {rss_trimmed / 2**20:.1f} MB (freed memory malloc had kept: "
          f"{(rss1 - rss_trimmed) / 2**20:.1f} MB)")
    if released is not None:
        print(f"  the app gave freed heap back {released[0]} times: {released[1] / 2**20:.1f} MB "
              f"in all, longest call {released[2] * 1000:.1f} ms (off the GUI thread)")
    else:
        print("  the app gives no freed heap back here (no malloc_trim)")
    print("  resident by mapping (MB, start -> end): " + ", ".join(
        f"{k} {maps0.get(k, 0):.1f} -> {v:.1f}" for k, v in sorted(maps1.items())))
    if heap:
        print(heap)
    print(f"event loop lateness: P50 {lateness.percentile_s(50) * 1000:.1f} ms, P99 "
          f"{p99 * 1000:.1f} ms, max {lateness.max_s * 1000:.1f} ms  goal: P99 <= "
          f"{GOAL_P99_S * 1000:.0f} ms")
    print(f"open fds: {fds0} -> {fds1}; threads: {threads0} -> {threads1}  goal: no more at the "
          "end than at the start")
    longest_full_ms = max(full_collections, default=0.0) * 1000
    print(f"full (generation 2) collections: {len(full_collections)}, longest "
          f"{longest_full_ms:.1f} ms; {gc.get_freeze_count()} start-up objects frozen")
    pnt = np.array(paints or [0.0]) * 1000
    print(f"dashboard paint: P50 {np.percentile(pnt, 50):.1f} ms, P99 "
          f"{np.percentile(pnt, 99):.1f} ms, max {pnt.max():.1f} ms ({len(paints)} paints)")
    for where, n in sorted(blocks.items(), key=lambda kv: -kv[1])[:3]:
        print(f"GUI thread seen blocked > {args.blocks_ms:.0f} ms {n}x at:\n{where}")
    print("goals: all met" if not misses else f"goals MISSED: {', '.join(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
