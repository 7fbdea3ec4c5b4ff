"""Launch, watch, fail, recover and quit against a stand-in ``vllm`` that replays real logs.

The stand-in (tests/fakes/fake_vllm.py) is a real child process: it prints recorded vLLM 0.32 log
lines, serves /health and a recorded /metrics payload, and exits on SIGINT. The supervisor,
log scanner, metrics scraper, telemetry and fit engine are the real ones. The same flows run
against the real vLLM CPU engine in test_main_window_e2e.py.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from guikit import wait_for_state
from orphankit import make_orphan
from ports import free_port
from PySide6.QtWidgets import QApplication
from testpaths import TESTS as TESTS_DIR

from kvpilot.core.app import settings as st
from kvpilot.core.base import failures
from kvpilot.core.base import lifecycle as phases
from kvpilot.core.hardware.proctree import alive as _alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm import logparse

TESTS = TESTS_DIR
FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"
FAIL_LOG = TESTS / "data" / "supervisor" / "fail_b1_kvbytes_tiny.log"
FAST = {"check_flags": False, "settle_s": 0.1, "health_interval_s": 0.1}


@pytest.fixture(autouse=True)
def _catalog_models_need_no_download(monkeypatch):
    """The stand-in vllm serves catalog plans without weights: skip kvpilot's Hub download
    (tests/gui/test_download_gui.py covers it against a local stand-in Hub)."""
    from kvpilot.core.app import launch

    monkeypatch.setattr(launch, "launchable_spec", lambda spec, **_: spec)


@pytest.fixture
def fake_runtime() -> VllmRuntime:
    return VllmRuntime((sys.executable, str(FAKE_VLLM)), "0.32.0", "env", str(FAKE_VLLM))


@pytest.fixture
def server_window(make_window, fake_runtime, qtbot):
    def make(**kw):
        w = make_window(supervisor_options=dict(FAST), **kw)
        port = free_port(19400)
        w.settings = st.update_profile(w.settings, replace(w.profile, port=port, sampling_hz=5.0))
        w.runtime_control.set_runtime(fake_runtime)
        qtbot.waitUntil(
            lambda: (
                w.planner.selected() is not None
                and w.planner.selected().inputs.vllm_version == "0.32.0"
            ),
            timeout=15_000,
        )
        return w

    return make


def test_launch_pressed_twice_starts_one_server(server_window, qtbot) -> None:
    """F5 twice before the first launch has its supervisor: the second is refused (it used to
    stop the first launch while vLLM was still importing and start another)."""
    w = server_window()
    starts = []
    real_start = w.services.start_server

    def counted_start(*args, **kw):
        starts.append(args)
        return real_start(*args, **kw)

    w.services.start_server = counted_start
    w.launch_action.trigger()
    w.launch_action.trigger()
    assert "already starting" in w.statusBar().currentMessage()
    wait_for_state(qtbot, w, "ready", "failed", timeout=30_000)
    assert w.server_panel.state == "ready"
    assert len(starts) == 1
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=30_000)


def test_launch_phases_ready_plots_stop(server_window, qtbot, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    w = server_window()
    assert w.server_panel.launch_button.isEnabled()
    row = w.planner.selected()
    assert row is not None and row.fits
    w.launch_action.trigger()  # F5
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    sup = w.services.supervisor
    # the start-up phases were shown, in order, ending with the API server. The log reader and
    # the readiness poll are separate threads, so the last phase may be shown just after "ready"
    qtbot.waitUntil(
        lambda: logparse.STARTING_API in w.server_panel.phases_seen, timeout=20_000
    )
    seen = w.server_panel.phases_seen
    assert seen[-1] == logparse.STARTING_API
    order = list(phases.PHASES)
    assert [order.index(p) for p in seen] == sorted(order.index(p) for p in seen)
    assert w.server_panel.endpoint.text() == f"{sup.base_url}/v1"
    # the stand-in is not on the replayed GPU, and the legend says so instead of "0.0 GiB"
    assert "vLLM holds no memory on this GPU" in w.gpu_panel.legend.text()
    assert w.server_panel.endpoint.isVisible()
    assert "up 00:00:0" in w.server_panel.elapsed.text()
    # predicted vs reported capacity
    qtbot.waitUntil(
        lambda: "vLLM reported 1,048,576" in w.server_panel.capacity.text(), timeout=20_000
    )
    assert "Predicted KV" in w.server_panel.capacity.text()
    # what vLLM reported is kept for the fit engine (keyed by GPU, model, version, settings)
    from kvpilot.core.fit.calibrate import key_for
    from kvpilot.core.fit.measurements import SOURCE_LAUNCH, MeasurementStore

    store = MeasurementStore(w.services.data_dir / "measurements.json")
    key = key_for(w.server_control.current_request.inputs)
    qtbot.waitUntil(lambda: store.lookup(key) is not None, timeout=20_000)
    got = store.lookup(key)
    # the figures of the replayed log and /metrics payload, under this plan's key
    assert got.source == SOURCE_LAUNCH
    assert got.kv_cache_tokens == 1_048_576
    assert got.available_kv_bytes == 1 << 30  # cache_config_info kv_cache_memory_bytes
    assert got.num_blocks == 8192 and got.block_size == 128
    assert got.max_concurrency == pytest.approx(1024.0)
    assert got.startup_s is not None and 0 < got.startup_s < 30
    # the dashboard is in front and its plots receive points from /metrics and NVML
    assert w.tabs.currentWidget() is w.dashboard
    qtbot.waitUntil(
        lambda: w.dashboard.point_count("kv") >= 2 and w.dashboard.point_count("queue") >= 2,
        timeout=15_000,
    )
    qtbot.waitUntil(lambda: w.dashboard.point_count("vram") >= 2, timeout=20_000)
    assert w.dashboard.frames > 0
    # the log view has the server's lines, filterable by level and searchable
    # (the stand-in answers /health as it prints "Starting vLLM server": that line may still be
    # in the pipe or the 100 ms drain when the state turns ready, so wait for it)
    qtbot.waitUntil(
        lambda: w.log_view.line_count() > 10
        and "Starting vLLM server" in w.log_view.visible_text(),
        timeout=20_000,
    )
    w.log_view.level.setCurrentIndex(2)  # WARNING and above
    assert " INFO " not in w.log_view.visible_text()
    w.log_view.level.setCurrentIndex(0)
    w.log_view.search.setText("KV cache size")
    assert all("KV cache size" in ln for ln in w.log_view.visible_text().splitlines())
    # stop: every process of the tree is gone
    # the supervisor collects the tree's descendants on its own thread right after "ready"
    qtbot.waitUntil(lambda: len(sup.tree_pids()) == 2, timeout=20_000)
    tree = sup.tree_pids()
    w.stop_action.trigger()  # Shift+F5
    wait_for_state(qtbot, w, "stopped", timeout=30_000)
    qtbot.waitUntil(lambda: not _alive(tree), timeout=20_000)
    assert w.services.metrics_sampler is None
    assert w.server_panel.launch_button.isEnabled()


def test_failed_launch_banner_and_one_click_fallback(server_window, qtbot, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(FAIL_LOG))
    w = server_window()
    first_inputs = w.planner.selected().inputs
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "failed", timeout=30_000)
    assert w.fallback_control.last_failure is not None
    assert w.fallback_control.last_failure.kind == failures.KV_CACHE_TOO_SMALL
    qtbot.waitUntil(lambda: bool(w.banner.option_buttons), timeout=15_000)
    assert w.banner.isVisible()
    assert "max seq len" in w.banner.cause.text() or "KV cache" in w.banner.cause.text()
    labels = [b.text() for b in w.banner.option_buttons]
    assert labels == [o.label for o in w.fallback_control.fallback_options]
    tips = [b.toolTip() for b in w.banner.option_buttons]
    assert tips == [
        o.change + ("" if o.predicted_fits else " (predicted not to fit either)") + f" (Alt+{i})"
        for i, o in enumerate(w.fallback_control.fallback_options, start=1)
    ]
    assert all(tip for tip in tips)
    first = w.fallback_control.fallback_options[0]
    assert first.inputs != first_inputs
    # the next launch succeeds (the stand-in is told to start normally)
    monkeypatch.setenv("FAKE_VLLM_MODE", "ready")
    monkeypatch.delenv("FAKE_VLLM_LOG")
    w.banner.option_buttons[0].click()
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    assert not w.banner.isVisible()
    assert w.server_control.current_request.inputs == replace(first.inputs)
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=30_000)


GRAPH_OOM_LOG = TESTS / "data" / "supervisor" / "cuda_oom_graph_capture.log"
NEGATIVE_LOG = TESTS / "data" / "supervisor" / "negative_kv_budget.log"


def test_graph_capture_oom_banner_shows_each_fix_with_its_effect(
    server_window, qtbot, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(GRAPH_OOM_LOG))
    monkeypatch.setenv("FAKE_VLLM_FAIL_UNLESS", "--max-cudagraph-capture-size")
    w = server_window()
    w.server_control.launch_selected()
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=30_000)
    assert w.fallback_control.last_failure.kind == failures.CUDA_OOM_GRAPHS
    assert "FULL, 20 of 35" in w.banner.cause.text()
    qtbot.waitUntil(lambda: bool(w.banner.option_buttons), timeout=15_000)
    labels = [b.text() for b in w.banner.option_buttons]
    kinds = [o.kind for o in w.fallback_control.fallback_options]
    assert {"eager", "smaller_capture_sizes", "piecewise_graphs"} <= set(kinds)
    capture = labels[kinds.index("smaller_capture_sizes")]
    assert "--max-cudagraph-capture-size" in capture and "CUDA graphs" in capture
    assert "GiB" in labels[kinds.index("piecewise_graphs")]
    # one click on "smaller capture sizes" relaunches with it, and the stand-in then serves
    w.banner.option_buttons[kinds.index("smaller_capture_sizes")].click()
    qtbot.waitUntil(lambda: w.server_panel.state == "ready", timeout=30_000)
    assert w.server_control.current_request.inputs.max_cudagraph_capture_size is not None
    w.server_control.stop_server()
    qtbot.waitUntil(lambda: w.server_panel.state == "stopped", timeout=30_000)


def test_negative_budget_banner_offers_a_utilization_that_covers_it(
    server_window, qtbot, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(NEGATIVE_LOG))
    w = server_window()
    w.server_control.launch_selected()
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=30_000)
    assert w.fallback_control.last_failure.kind == failures.NEGATIVE_KV_BUDGET
    assert "-1.25 GiB" in w.banner.cause.text()
    qtbot.waitUntil(
        lambda: bool(w.banner.option_buttons) or "working out" not in w.banner.note.text(),
        timeout=15_000,
    )
    kinds = [o.kind for o in w.fallback_control.fallback_options]
    assert "shorter_context" not in kinds
    assert kinds, w.banner.note.text()
    labels = [b.text() for b in w.banner.option_buttons]
    assert all("—" in label for label in labels)
    assert any("utilization" in label and "KV" in label for label in labels) or any(
        "close other programs" in label for label in labels)


def test_an_unrecognised_failure_shows_vllms_last_error_line(
    server_window, qtbot, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv(
        "FAKE_VLLM_LOG", str(TESTS / "data" / "supervisor" / "unknown_failure_newer_release.log")
    )
    w = server_window()
    w.server_control.launch_selected()
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=30_000)
    assert w.fallback_control.last_failure.kind == failures.UNKNOWN
    qtbot.waitUntil(lambda: "working out" not in w.banner.note.text(), timeout=15_000)
    assert "PlannerError: the fused MoE planner needs 3 GiB of scratch space" in (
        w.banner.cause.text()
    )


def test_closing_asks_then_stops_the_server(server_window, qtbot, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    asked: list[bool] = []

    def confirm() -> bool:
        asked.append(True)
        return len(asked) > 1  # refuse the first time, accept the second

    w = server_window(confirm_stop=confirm)
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    tree = w.services.supervisor.tree_pids()
    w.close()
    assert asked == [True] and w.isVisible()  # refused: still open, server still running
    assert _alive(tree) == tree
    w.close()
    assert len(asked) == 2
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=30_000)
    assert w.services.supervisor.state == "stopped"
    assert not _alive(tree)


def test_quitting_the_application_stops_the_server(server_window, qtbot, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    w = server_window()
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    tree = w.services.supervisor.tree_pids()
    QApplication.instance().aboutToQuit.emit()  # what app.quit() / Ctrl+C / SIGTERM lead to
    assert not _alive(tree)


def test_a_server_left_by_a_crashed_kvpilot_is_offered_and_stopped(
    make_window, qtbot, isolated_dirs, monkeypatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    port = free_port(19700)
    tree = make_orphan(isolated_dirs / "data", port)
    assert _alive(tree) == tree
    w = make_window()
    qtbot.waitUntil(lambda: w.orphan_bar.isVisible(), timeout=10_000)
    assert f"127.0.0.1:{port}" in w.orphan_label.text()
    w.orphan_stop.click()
    qtbot.waitUntil(lambda: not _alive(tree), timeout=30_000)
    qtbot.waitUntil(lambda: not w.orphan_bar.isVisible(), timeout=10_000)


def test_an_orphaned_server_can_be_adopted_and_closing_stops_it(
    make_window, qtbot, isolated_dirs, monkeypatch
) -> None:
    port = free_port(19750)
    tree = make_orphan(isolated_dirs / "data", port)
    w = make_window()
    qtbot.waitUntil(lambda: w.orphan_bar.isVisible(), timeout=10_000)
    assert w.orphan_control.adopt_orphan()
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    assert w.server_panel.endpoint.text() == f"http://127.0.0.1:{port}/v1"
    # the log view says that the old log stream is gone (its output went to the dead kvpilot)
    qtbot.waitUntil(lambda: "old log stream has ended" in w.log_view.visible_text(), timeout=5000)
    # and the adopted server has telemetry: /metrics is scraped into the dashboard
    qtbot.waitUntil(lambda: w.dashboard.point_count("kv") >= 2, timeout=15_000)
    w.close()
    qtbot.waitUntil(lambda: not w.isVisible(), timeout=30_000)
    assert not _alive(tree)


def test_pressure_fix_relaunches_with_the_suggested_setting(server_window, qtbot) -> None:
    w = server_window()
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", timeout=30_000)
    first_pid = w.services.supervisor.pid
    users = w.server_control.current_request.inputs.max_num_seqs
    assert w.fallback_control.apply_pressure_fix("preemptions")  # "One user fewer"
    qtbot.waitUntil(
        lambda: w.services.supervisor.pid != first_pid and w.server_panel.state == "ready",
        timeout=30_000,
    )
    assert w.server_control.current_request.inputs.max_num_seqs == users - 1
    assert not w.fallback_control.apply_pressure_fix("cpu_bound")  # no one-click fix for that one
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=30_000)


def test_free_memory_checked_again_at_launch_names_the_desktop(server_window, qtbot) -> None:
    """The plan was made when more memory was free; at launch NVML says 22.15 GiB free (Xorg,
    gnome-shell and Firefox hold 1.5 GiB), so vLLM would refuse utilization 0.95: nothing is
    started, the banner names the programs and offers a utilization that fits."""
    from kvpilot.core.base.units import GiB
    from kvpilot.gui.services import LaunchRequest

    w = server_window()
    row = w.planner.selected()
    assert row is not None and row.inputs is not None
    stale = replace(row.inputs, gpu_free_bytes=24 * GiB, gpu_memory_utilization=0.95)
    assert w.services.compute_capacity(stale).failure is None  # fits by the stale reading
    assert w.server_control.launch_request(
        LaunchRequest(inputs=stale, model=row.model_ref, profile=w.profile)
    )
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=15_000)
    assert w.services.supervisor is None  # nothing was started
    failure = w.fallback_control.last_failure
    assert failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    assert "firefox (0.8 GiB), Xorg (0.4 GiB), gnome-shell (0.3 GiB)" in failure.message
    qtbot.waitUntil(lambda: bool(w.banner.option_buttons), timeout=15_000)
    first = w.fallback_control.fallback_options[0]
    assert first.inputs.gpu_memory_utilization < 0.95
    request = w.server_control.current_request
    assert first.inputs.gpu_free_bytes == request.inputs.gpu_free_bytes < 24 * GiB


def test_an_unwritable_data_folder_is_told_at_start_with_its_variable(
    make_window, qtbot, tmp_path, monkeypatch
) -> None:
    blocked = tmp_path / "in-the-way"
    blocked.write_text("a file where the data folder should be\n")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(blocked / "data"))
    w = make_window()
    qtbot.waitUntil(w.banner.isVisible, timeout=10_000)
    text = w.banner.cause.text().replace("\u200b", "")  # the long path's break hints
    assert "kvpilot cannot keep its files:" in text
    assert f"kvpilot's data folder {blocked / 'data'} cannot be written" in text
    assert "KVPILOT_DATA_DIR" in text


def test_a_launch_whose_log_folder_cannot_be_written_names_it_not_errno(
    server_window, qtbot, monkeypatch
) -> None:
    """The launch log folder turns unwritable after the start (a file took its place): the
    banner names kvpilot's folder and the variable, not a bare "[Errno ...]"."""
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    w = server_window()
    logs = w.services.data_dir / "logs"
    if logs.exists():
        import shutil

        shutil.rmtree(logs)
    logs.write_text("a file where the launch logs go\n")
    w.launch_action.trigger()
    qtbot.waitUntil(w.banner.isVisible, timeout=30_000)
    text = w.banner.cause.text().replace("\u200b", "")
    assert "vLLM was not started:" in text and "Errno" not in text
    assert f"kvpilot's launch log folder {logs} cannot be written" in text
    assert "KVPILOT_DATA_DIR" in text
    assert w.services.supervisor is None or w.services.supervisor.state in (None, "failed")


def test_launch_waits_for_a_plan_and_says_why_in_its_tooltip(server_window, qtbot) -> None:
    w = server_window()
    button = w.server_panel.launch_button
    assert button.isEnabled()
    assert button.toolTip() == "Launch the selected plan (F5)"
    rows = list(w.planner.rows)
    w.planner.set_plans([], "nothing planned")  # no plan: Launch is off, the tooltip says why
    assert not button.isEnabled()
    assert button.toolTip().startswith("no plan to launch: select one in the table")
    w.launch_action.trigger()  # the shortcut starts nothing either
    assert w.services.supervisor is None
    unfit = [r for r in rows if not r.launchable and r.inputs is not None]
    if unfit:  # a selected plan that does not fit: its reason
        w.planner.set_plans(unfit[:1], "one plan that does not fit")
        w.planner.table.selectRow(0)
        assert not button.isEnabled()
        assert button.toolTip().startswith(f"{unfit[0].title} does not fit")
    w.planner.set_plans(rows, "the plans again")
    assert button.isEnabled()


def test_an_unreadable_proc_opens_planner_mode_with_the_sentence(
    make_window, qtbot, tmp_path, monkeypatch
) -> None:
    """psutil pointed at an empty /proc (as in a container without it): the window plans in
    planner mode and says why, naming /proc and the fix."""
    import psutil

    empty = tmp_path / "proc"
    empty.mkdir()
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(empty))
    w = make_window()
    qtbot.waitUntil(lambda: "cannot read the machine's memory" in w.statusBar().currentMessage(),
                    timeout=15_000)
    said = w.statusBar().currentMessage()
    assert said.startswith("planner mode: kvpilot cannot read the machine's memory from ")
    assert "mount -t proc proc /proc" in said
    assert w.gpu_control.target is not None  # planning goes on for a card of the spec table
