"""Supervisor against a stand-in ``vllm`` that replays real log lines (fast, no engine).

The stand-in (tests/fakes/fake_vllm.py) serves /health, /v1/models and /metrics like vLLM and can
linger, ignore SIGTERM, die after ready, or print GPU-only failures such as CUDA out of memory.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from ports import free_port
from testpaths import DATA as TESTS_DATA
from testpaths import TESTS

from kvpilot.core.base import failures
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm import logparse
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.states import (
    FAILED,
    READY,
    STOPPED,
    CapacityUpdatedEvent,
    LogLineEvent,
    StateEvent,
    iter_states,
)
from kvpilot.core.vllm.supervisor import Supervisor

FAKE = TESTS / "fakes" / "fake_vllm.py"
DATA = TESTS_DATA / "supervisor"


@pytest.fixture
def fake_runtime() -> VllmRuntime:
    return VllmRuntime((sys.executable, str(FAKE)), "0.32.0", "env", str(FAKE))


@pytest.fixture
def run_fake(
    fake_runtime: VllmRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Supervisor]]:
    started: list[Supervisor] = []

    def start(env: dict[str, str] | None = None, **spec_kw: object) -> Supervisor:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        spec = LaunchSpec(
            model="/models/tiny",
            port=free_port(19000),
            **spec_kw,  # type: ignore[arg-type]
        )
        sup = Supervisor(
            fake_runtime, spec, data_dir=tmp_path / "data", check_flags=False, settle_s=0.1
        )
        sup.start()
        started.append(sup)
        return sup

    yield start
    for sup in started:
        sup.stop(sigint_wait_s=1.0, sigterm_wait_s=1.0)


def test_ready_capacity_stop_and_files(run_fake: Callable[..., Supervisor], tmp_path: Path) -> None:
    sup = run_fake({"FAKE_VLLM_CHILD": "1"})
    assert sup.wait_ready(20), sup.lines()[-5:]
    assert sup.base_url == f"http://127.0.0.1:{sup.port}"
    assert sup.model_name == "/models/tiny"
    phases = [e.phase for e in sup.events() if isinstance(e, logparse.PhaseEvent)]
    assert phases and phases[-1] == logparse.STARTING_API
    deadline = time.monotonic() + 5
    while "metrics" not in sup.capacity.sources and time.monotonic() < deadline:
        time.sleep(0.05)
    cap = sup.capacity
    assert cap.kv_cache_tokens == 1_048_576  # from the log line
    assert cap.concurrency_for_len == 1024
    assert cap.kv_cache_memory_bytes == 1 << 30  # from vllm:cache_config_info
    assert cap.num_blocks == 8192 and cap.block_size == 128
    assert any(isinstance(e, CapacityUpdatedEvent) for e in sup.events())
    pidfile = tmp_path / "data" / "servers" / f"{sup.port}.json"
    assert json.loads(pidfile.read_text())["pid"] == sup.pid
    tree = sup.tree_pids()
    assert len(tree) == 2  # the API server and its child
    report = sup.stop()
    assert report.clean and report.signals[0] == "SIGINT"
    assert sup.state == STOPPED
    assert list(iter_states(sup.events())) == ["starting", "ready", "stopping", "stopped"]
    assert not any(psutil.pid_exists(p) for p in tree if _not_zombie(p))
    assert not pidfile.exists()
    assert sup.log_path is not None
    assert "Starting vLLM server on" in sup.log_path.read_text()


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_kv_too_small_is_classified_while_the_process_lingers(
    run_fake: Callable[..., Supervisor], tmp_path: Path
) -> None:
    marks = tmp_path / "marks.json"
    sup = run_fake(
        {
            "FAKE_VLLM_MODE": "fail",
            "FAKE_VLLM_LOG": str(DATA / "fail_b1_kvbytes_tiny.log"),
            "FAKE_VLLM_FAIL_RE": "estimated maximum model length",
            "FAKE_VLLM_LINGER_S": "60",
            "FAKE_VLLM_IGNORE_TERM": "1",
            "FAKE_VLLM_MARKS": str(marks),
        }
    )
    assert sup.wait_for((READY,), 20) == FAILED
    failed = next(e for e in sup.events() if isinstance(e, StateEvent) and e.state == FAILED)
    states = [e.state for e in sup.events() if isinstance(e, StateEvent)]
    assert states == [SupervisorState.STARTING, SupervisorState.FAILED]
    assert all(type(state) is SupervisorState for state in states)
    assert sup.failure is not None
    assert sup.failure.kind == failures.KV_CACHE_TOO_SMALL
    assert sup.failure.estimated_max_model_len == 128
    # failed on the line itself: the process lingers, and its end could come no sooner than the
    # 3 s exit grace after the line (how soon the line is read: benchmarks/supervisor_latency.py)
    assert failed.at_s - json.loads(marks.read_text())["fail_line_at"] < 2.5
    assert sup.wait_stopped(20)
    report = sup.stop_report
    assert report is not None and report.clean and "SIGKILL" in report.signals


def test_cuda_oom_while_loading_from_a_gpu_log(run_fake: Callable[..., Supervisor]) -> None:
    sup = run_fake({"FAKE_VLLM_MODE": "fail", "FAKE_VLLM_LOG": str(DATA / "cuda_oom_loading.log")})
    assert sup.wait_for((READY,), 20) == FAILED
    assert sup.failure is not None and sup.failure.kind == failures.CUDA_OOM_LOADING


def test_engine_death_after_ready_is_failed_engine_died_quickly(
    run_fake: Callable[..., Supervisor], tmp_path: Path
) -> None:
    marks = tmp_path / "marks.json"
    sup = run_fake(
        {
            "FAKE_VLLM_MODE": "die_after_ready",
            "FAKE_VLLM_DIE_AFTER_S": "1.5",
            "FAKE_VLLM_MARKS": str(marks),
        }
    )
    assert sup.wait_ready(20)
    assert sup.wait_for((FAILED,), 10) == FAILED
    assert sup.failure is not None and sup.failure.kind == failures.ENGINE_DIED
    failed = next(e for e in sup.events() if isinstance(e, StateEvent) and e.state == FAILED)
    assert failed.at_s - json.loads(marks.read_text())["dead_at"] < 2.0


def test_exit_before_ready_without_a_known_line_is_unknown(
    run_fake: Callable[..., Supervisor], tmp_path: Path
) -> None:
    log = tmp_path / "short.log"
    log.write_text("something odd happened\n")
    sup = run_fake({"FAKE_VLLM_MODE": "fail", "FAKE_VLLM_LOG": str(log), "FAKE_VLLM_EXIT": "3"})
    assert sup.wait_for((READY,), 20) == FAILED
    assert sup.failure is not None and sup.failure.kind == failures.UNKNOWN
    assert sup.returncode == 3


def test_api_key_never_reaches_lines_events_or_log(
    run_fake: Callable[..., Supervisor], tmp_path: Path
) -> None:
    secret = "sk-test-" + os.urandom(6).hex()
    sup = run_fake({"FAKE_VLLM_ECHO_ENV": "VLLM_API_KEY"}, api_key=secret)
    assert sup.wait_ready(20)
    sup.stop()
    assert not any(isinstance(e, LogLineEvent) for e in sup.events())  # lines are in lines()
    lines = sup.lines()
    assert any("VLLM_API_KEY=***" in line for line in lines)
    assert not any(secret in line for line in lines)
    assert sup.log_path is not None and secret not in sup.log_path.read_text()
    assert secret not in repr(sup.events())
    pidfiles = list((tmp_path / "data").rglob("*.json"))
    assert all(secret not in p.read_text() for p in pidfiles)


def test_a_second_cleanup_waits_for_the_first_and_never_signals_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop() during the monitor's failure clean-up must not run a second stop_tree."""
    import subprocess
    import threading

    from kvpilot.core.hardware.proctree import StopReport
    from kvpilot.core.vllm import supervisor as sv

    calls: list[float] = []
    release = threading.Event()

    def slow_stop_tree(pid: int, pgid: int, **_: object) -> StopReport:
        calls.append(time.monotonic())
        release.wait(5)
        return StopReport(("SIGINT",), (), (), 0.1)

    monkeypatch.setattr(sv, "stop_tree", slow_stop_tree)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sup = Supervisor(None, None, data_dir=tmp_path)
        sup._pid = sup._pgid = child.pid
        first = threading.Thread(target=sup._cleanup, args=(1.0, 1.0, 1.0))
        first.start()
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.01)
        second: list[StopReport] = []
        t2 = threading.Thread(target=lambda: second.append(sup.stop()))
        t2.start()
        time.sleep(0.2)
        assert len(calls) == 1
        assert t2.is_alive(), "the second clean-up returned before the first finished"
        release.set()
        first.join(5)
        t2.join(5)
        assert len(calls) == 1
        assert second == [StopReport(("SIGINT",), (), (), 0.1)]
        assert sup.stop_report is second[0]
    finally:
        child.kill()
        child.wait()
