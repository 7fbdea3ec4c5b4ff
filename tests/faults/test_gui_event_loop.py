"""Nothing kvpilot does on the GUI thread blocks its event loop, and no long task holds a pool
thread that planning needs.

Faults: a /metrics endpoint that accepts the connection and never answers while the server is
stopped and the window closed (a sampler stuck in a scrape used to be joined on the GUI thread
for up to 5 s, the GPU sampler for 2 s more); a model download of minutes before a launch (it
used to fill a thread-pool slot that planning needs); a flood of log lines.

A block is a fault here from :data:`faultkit.BLOCKED_S` (1 s) on: half the shortest block these
faults caused, above what a loaded two-core machine adds (431 ms at worst, seen with two busy
loops and another test run beside it). The GUI's 50 ms goal is measured
by ``benchmarks/gui_responsiveness.py``, which runs the same three scenes and prints it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import faultkit
import pytest
from faultkit import BLOCKED_S
from PySide6.QtCore import QThreadPool


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never sends a byte."""
    with faultkit.silent_server() as url:
        yield url


def test_stop_and_close_with_a_hung_metrics_endpoint_never_block_the_loop(
    make_window, qtbot, loop_probe, silent_server
) -> None:
    w = make_window("rtx4090-desktop")
    w.services.start_metrics(silent_server, 5.0)
    sampler = w.services.metrics_sampler
    time.sleep(0.3)  # the sampler thread is now inside a scrape that will time out (2 s)
    assert sampler.running
    loop_probe.ticks.clear()
    loop_probe.tick()
    w.services.stop_metrics()  # what the STOPPED / FAILED state handler calls
    w._finish_close()  # what closing the window calls
    # neither call waited for the sampler: it is still inside its scrape (2 s timeout), so a
    # join on the GUI thread, the fault, cannot have happened whatever the machine's load
    still_scraping = sampler.running
    qtbot.wait(300)
    worst = loop_probe.worst_lateness_s
    print(f"event loop: worst lateness {worst * 1000:.1f} ms over {len(loop_probe.ticks)} ticks")
    assert still_scraping
    assert worst < BLOCKED_S
    assert w.services.metrics_sampler is None and w.services.gpu_sampler is None
    # the threads end in the background all the same: nothing is left behind
    assert w.services.join_background(10)
    assert not sampler.running


def test_a_long_download_before_a_launch_holds_no_pool_thread(
    make_window, qtbot, loop_probe, monkeypatch
) -> None:
    from kvpilot.core.app import launch
    from kvpilot.core.runtimes.discovery import VllmRuntime

    started = threading.Event()
    release = threading.Event()
    monkeypatch.setattr(launch, "launchable_spec", faultkit.slow_download(started, release))
    w = make_window("rtx4090-desktop")
    w.runtime_control.set_runtime(VllmRuntime(("/bin/false",), "0.32.0", "env", "/bin/false"))
    qtbot.waitUntil(lambda: w.planner.selected() is not None, timeout=15_000)
    progress: list[object] = []
    w.services.bridge.download_progress.connect(progress.append)
    qtbot.wait(300)  # the first plan's chart is drawn before the fault starts
    w.server_control.launch_selected()
    assert started.wait(5)
    loop_probe.ticks.clear()
    loop_probe.tick()
    qtbot.wait(500)  # progress reports arrive and are shown meanwhile
    worst = loop_probe.worst_lateness_s
    print(f"event loop during a download: worst lateness {worst * 1000:.1f} ms")
    assert worst < BLOCKED_S
    # the pool is free for planning while the download runs (no thread of it is held: a pool
    # task of the window's own may still be finishing on a busy machine), and a replan completes
    pool = QThreadPool.globalInstance()
    qtbot.waitUntil(lambda: pool.activeThreadCount() == 0, timeout=5_000)
    assert not release.is_set() and started.is_set()  # the download still runs meanwhile
    generation = w.planner.rows
    w.plan_control.replan()
    qtbot.waitUntil(lambda: w.planner.rows is not generation, timeout=15_000)
    assert len(progress) > 10  # the progress flood reached the GUI thread meanwhile
    release.set()
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=10_000)


def test_a_log_flood_reaches_the_log_view_in_batches_and_the_loop_stays_responsive(
    make_window, qtbot, loop_probe
) -> None:
    """100,000 lines/s for one second, sent as the supervisor sends them (from its thread)."""
    w = make_window("rtx4090-desktop")
    w.services.supervisor = object()  # the window shows the output of a running server
    sink = w.services._supervisor_event_sink()
    total = faultkit.FLOOD_LINES

    take, batches = w.services.take_log_lines, []

    def counted_take():
        lines, dropped = take()
        if lines:
            batches.append(len(lines))
        return lines, dropped

    w.services.take_log_lines = counted_take
    t = threading.Thread(target=faultkit.flood_log, args=(sink,))
    qtbot.wait(300)
    loop_probe.ticks.clear()
    loop_probe.tick()
    t0 = time.monotonic()
    t.start()
    qtbot.waitUntil(
        lambda: bool(w.log_view._lines) and faultkit.FLOOD_LAST in w.log_view._lines[-1][1],
        timeout=30_000,
    )
    shown_s = time.monotonic() - t0
    t.join()
    worst = loop_probe.worst_lateness_s
    print(f"GUI log flood: {total:,} lines, last shown after {shown_s:.1f} s in {len(batches)} "
          f"batches; worst lateness {worst * 1000:.0f} ms")
    # taken in batches by the window's timer, not one queued signal a line (which took 7 s to
    # show this second of output); how soon is printed above, not bounded on a busy machine
    assert 0 < len(batches) <= total // 100
    assert worst < BLOCKED_S
    assert w.log_view.line_count() <= 5000
    assert any("not shown here" in line for _, line in w.log_view._lines)
    w.services.supervisor = None
