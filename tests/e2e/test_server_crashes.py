"""kvpilot killed while serving (orphan found, adopted), the engine killed (engine_died), and the
measured dry run, all against the real CPU engine."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

from kvpilot.core.base import failures
from kvpilot.core.base.versions import Release
from kvpilot.core.fit.measurements import SOURCE_DRY_RUN, MeasurementStore, measurement_key
from kvpilot.core.hardware.proctree import alive as _alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.measure import run_measurement
from kvpilot.core.vllm.orphans import find_orphans, stop_orphan
from kvpilot.core.vllm.supervisor import FAILED, StateEvent, Supervisor

from .conftest import READY_TIMEOUT_S
from .servekit import kill_cli, serve_argv, serve_env, start_serve, wait_event


def test_kvpilot_killed_orphan_found_adopted_then_engine_killed(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    proc = start_serve(
        serve_argv(vllm_runtime.location, tiny_model, tmp_path), serve_env(vllm_scratch, tmp_path)
    )
    events = wait_event(proc, "ready", READY_TIMEOUT_S)
    server_pid = events[-1]["pid"]
    base_url = events[-1]["base_url"]
    kill_cli(proc)  # kvpilot crashes; vLLM lives on in its own session
    tree = {server_pid, *(c.pid for c in psutil.Process(server_pid).children(recursive=True))}
    try:
        assert httpx.get(base_url + "/health", timeout=10).status_code == 200

        orphans = find_orphans(tmp_path)
        assert [o.record.pid for o in orphans] == [server_pid]
        orphan = orphans[0]
        assert orphan.leader_alive and set(orphan.pids) >= {server_pid}

        sup = Supervisor.attach(orphan, data_dir=tmp_path)
        assert sup.wait_ready(30)
        assert sup.base_url == base_url
        assert find_orphans(tmp_path) == []  # the pidfile now belongs to this process

        worker = next(
            p
            for p in psutil.Process(server_pid).children(recursive=True)
            if "Worker" in " ".join(p.cmdline()) or "Worker" in p.name()
        )
        killed_at = time.time()
        os.kill(worker.pid, signal.SIGKILL)
        assert sup.wait_for((FAILED,), 10) == FAILED
        failed = next(e for e in sup.events() if isinstance(e, StateEvent) and e.state == FAILED)
        assert sup.failure is not None and sup.failure.kind == failures.ENGINE_DIED
        assert failed.at_s - killed_at < 2.0
        assert sup.wait_stopped(60)
        assert sup.stop_report is not None and sup.stop_report.clean
    finally:
        for o in find_orphans(tmp_path):
            stop_orphan(o)
        for p in _alive(tree):
            os.kill(p, signal.SIGKILL)
    assert _alive(tree) == set()
    assert not list((tmp_path / "servers").glob("*.json"))


def test_orphan_left_after_kvpilot_is_killed_is_stopped_by_stop_orphan(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    # the dry-run load format keeps this quick; the process tree is the same
    proc = start_serve(
        serve_argv(vllm_runtime.location, tiny_model, tmp_path, "--load-format", "dummy"),
        serve_env(vllm_scratch, tmp_path),
    )
    events = wait_event(proc, "ready", READY_TIMEOUT_S)
    server_pid = events[-1]["pid"]
    tree = {server_pid, *(c.pid for c in psutil.Process(server_pid).children(recursive=True))}
    kill_cli(proc)
    try:
        orphans = find_orphans(tmp_path)
        assert len(orphans) == 1
        report = stop_orphan(orphans[0])
        assert report.clean and report.signals[0] == "SIGINT"
    finally:
        for p in _alive(tree):
            os.kill(p, signal.SIGKILL)
    assert _alive(tree) == set()
    assert find_orphans(tmp_path) == []


def test_measured_dry_run_stores_what_vllm_reported(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    store = MeasurementStore(tmp_path / "measurements.json")
    spec = launch_spec()
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    key = measurement_key(gpu_name="cpu", gpu_total_bytes=psutil.virtual_memory().total,
                          model=spec.model, vllm_version=vllm_runtime.version, settings=spec)
    measured = run_measurement(vllm_runtime, spec, store, READY_TIMEOUT_S, data_dir=tmp_path,
                               key=key)
    assert measured.source == SOURCE_DRY_RUN
    assert measured.kv_cache_tokens == 65_536
    assert measured.available_kv_bytes == 64 << 20
    assert measured.max_concurrency == 64.0 and measured.concurrency_for_len == 1024
    assert measured.startup_s is not None and measured.startup_s > 0
    assert MeasurementStore(store.path).lookup(key) == measured
    assert len(store.for_model(key)) == 1
    assert key.vllm_version == Release.parse(vllm_runtime.version).number
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert _alive(after - before) == set()
    logs = list((tmp_path / "logs").glob("*.log"))
    assert logs and "--load-format dummy" in logs[0].read_text().splitlines()[0]
