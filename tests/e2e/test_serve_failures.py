"""Real start-up failures of vLLM (CPU engine), classified; the KV fallback via ``kvpilot serve``.

Each failing start costs 11-56 s on 2 cores; the file name sorts before the happy-path files so
these run before the shared server starts.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from kvpilot.core.base import failures
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.supervisor import FAILED, READY, Supervisor

from .conftest import READY_TIMEOUT_S
from .servekit import serve_argv, serve_env, start_serve, wait_event


def _run_failing(runtime: VllmRuntime, spec: LaunchSpec, data_dir: Path, **kw: Any) -> Supervisor:
    # these tests check vLLM's own exit code, so vLLM must exit by itself: on two busy cores it
    # can take longer than the supervisor's default grace after the failing line
    kw.setdefault("exit_grace_s", 60.0)
    sup = Supervisor(runtime, spec, data_dir=data_dir, **kw)
    sup.start()
    state = sup.wait_for((READY,), READY_TIMEOUT_S)
    assert sup.wait_stopped(60)
    report = sup.stop_report
    assert report is not None and report.clean, report
    assert state == FAILED, (state, sup.lines()[-20:])
    return sup


def test_port_in_use_is_classified(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        sup = _run_failing(vllm_runtime, launch_spec(port=port), tmp_path)
    assert sup.failure is not None
    assert sup.failure.kind == failures.PORT_IN_USE
    assert sup.returncode == 1


def test_unknown_flag_reaches_vllm_and_exits_2(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    spec = launch_spec(extra_args=("--no-such-flag", "3"))
    sup = _run_failing(vllm_runtime, spec, tmp_path, check_flags=False)
    assert sup.failure is not None
    assert sup.failure.kind == failures.UNKNOWN_FLAG
    assert "--no-such-flag" in sup.failure.message
    assert sup.returncode == 2


def test_model_path_that_does_not_exist(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    spec = launch_spec(model=str(tmp_path / "no_such_model"))
    sup = _run_failing(vllm_runtime, spec, tmp_path)
    assert sup.failure is not None
    assert sup.failure.kind == failures.MODEL_NOT_FOUND
    assert sup.returncode == 1


def test_cli_refuses_an_unknown_flag_before_launch(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    proc = subprocess.run(
        serve_argv(vllm_runtime.location, tiny_model, tmp_path, "--", "--no-such-flag", "3",
                   tiny=False),
        capture_output=True,
        text=True,
        timeout=300,
        env=serve_env(vllm_scratch, tmp_path),
    )
    assert proc.returncode == 2, proc.stderr
    assert "--no-such-flag" in proc.stderr
    assert not list((tmp_path / "servers").glob("*.json"))


def test_cli_refuses_a_busy_port(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            serve_argv(vllm_runtime.location, tiny_model, tmp_path, "--port", str(port),
                       tiny=False),
            capture_output=True,
            text=True,
            timeout=300,
            env=serve_env(vllm_scratch, tmp_path),
        )
    assert proc.returncode == 2
    assert f"port {port}" in proc.stderr and "in use" in proc.stderr


def test_kv_cache_too_small_then_auto_fallback_serves_at_the_estimated_length(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    # a 256 KiB KV cache cannot hold 1,024 tokens: vLLM says how many it can
    argv = serve_argv(vllm_runtime.location, tiny_model, tmp_path,
                      "--kv-cache-memory-bytes", "262144", "--auto-fallback")
    proc = start_serve(argv, serve_env(vllm_scratch, tmp_path), keep_stderr=True)
    try:
        events = wait_event(proc, "ready", 2 * READY_TIMEOUT_S)
        failure = next(e for e in events if e["event"] == "failure")
        assert failure["kind"] == failures.KV_CACHE_TOO_SMALL
        assert failure["estimated_max_model_len"] == 128
        fallback = next(e for e in events if e["event"] == "fallback")
        assert fallback["changes"]["max_model_len"] == 128
        assert fallback["attempt"] == 1
        states = [e["state"] for e in events if e["event"] == "state"]
        assert states == ["starting", "failed", "starting", "ready"]
        assert any(e["event"] == "phase" for e in events)
        ready = events[-1]
        models = httpx.get(ready["base_url"] + "/v1/models", timeout=10).json()["data"]
        assert models[0]["max_model_len"] == 128
        tree = {ready["pid"], *(c.pid for c in psutil.Process(ready["pid"]).children(True))}
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    tail = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True
    assert not [
        p
        for p in tree
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]


def test_cpu_workers_share_all_taken_then_auto_fallback_raises_the_utilization(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    """A utilization whose share of the RAM is less than the CPU worker holds before its KV
    cache (vLLM 0.32.0 CPU: "requested memory for kv (-X/W GiB)"): classified as no KV memory,
    not as the engine dying, and the automatic fallback raises the utilization and serves."""
    util = max(0.001, round(0.25 * 2**30 / psutil.virtual_memory().total, 3))
    argv = serve_argv(vllm_runtime.location, tiny_model, tmp_path, "--max-model-len", "1024",
                      "--max-num-seqs", "4", "--enforce-eager", "--dtype", "float32",
                      "--gpu-memory-utilization", str(util), "--auto-fallback", tiny=False)
    proc = start_serve(argv, serve_env(vllm_scratch, tmp_path), keep_stderr=True)
    try:
        events = wait_event(proc, "ready", 2 * READY_TIMEOUT_S)
        failure = next(e for e in events if e["event"] == "failure")
        assert failure["kind"] == failures.NO_KV_MEMORY, failure
        assert failure["details"]["requested_for"] == "kv_cache_auto"
        fallback = next(e for e in events if e["event"] == "fallback")
        assert fallback["changes"]["gpu_memory_utilization"] > util
        assert "enforce_eager" not in fallback["changes"]
        states = [e["state"] for e in events if e["event"] == "state"]
        assert states == ["starting", "failed", "starting", "ready"]
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    tail = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True


@pytest.fixture(autouse=True)
def _no_stray_vllm_after() -> Iterator[None]:
    """Nothing a test here started may outlive it."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    after = {
        p.pid
        for p in psutil.Process().children(recursive=True)
        if p.status() != psutil.STATUS_ZOMBIE
    }
    assert after <= before, f"left running: {after - before}"
