"""Faults of the real vLLM CPU server (two server starts, ~1-2 minutes each on two cores):
the API server frozen with SIGSTOP once ready ("hung" within the limit), and the API server
killed with SIGKILL while the engine is still loading (its EngineCore is left and must go).
The engine core killed alone while serving is covered in tests/e2e/test_server_crashes.py.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvpilot.core.base import failures
from kvpilot.core.hardware.proctree import alive as _alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.orphans import pidfile_path
from kvpilot.core.vllm.supervisor import FAILED, STARTING, Supervisor

pytestmark = pytest.mark.e2e
READY_S = 240.0


def _cleaned(sup: Supervisor, tree: set[int]) -> None:
    assert sup.wait_stopped(60)
    deadline = time.monotonic() + 20
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(tree) == set(), "a process of the server tree was left"
    assert not pidfile_path(sup.data_dir, sup.port).exists()
    assert sup.log_path is not None and sup.log_path.stat().st_size > 0


def test_real_api_server_frozen_with_sigstop_is_hung_and_stopped(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    sup = Supervisor(vllm_runtime, launch_spec(), data_dir=tmp_path, hung_after_s=10.0)
    sup.start()
    tree: set[int] = set()
    try:
        assert sup.wait_ready(READY_S), sup.lines()[-20:]
        tree = sup.tree_pids()
        assert len(tree) >= 2  # API server + EngineCore
        t0 = time.monotonic()
        os.kill(sup.pid, signal.SIGSTOP)
        assert sup.wait_for((FAILED,), 30) == FAILED
        detect_s = time.monotonic() - t0
        print(f"real vLLM SIGSTOP -> {sup.failure.kind} after {detect_s:.1f} s")
        assert sup.failure.kind == failures.SERVER_HUNG
        assert 10.0 <= detect_s < 10.0 + 2 * 2.0 + 1.5
        _cleaned(sup, tree)
    finally:
        for pid in _alive(tree):
            os.kill(pid, signal.SIGKILL)
        sup.stop(sigint_wait_s=1, sigterm_wait_s=1)


def test_real_api_server_sigkilled_while_loading_leaves_no_engine_core(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    sup = Supervisor(vllm_runtime, launch_spec(), data_dir=tmp_path)
    sup.start()
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and sup.state == STARTING:
            tree = sup.tree_pids()
            if len(tree) >= 2:  # the EngineCore exists: the engine is loading
                break
            time.sleep(0.2)
        assert sup.state == STARTING and len(tree) >= 2, (sup.state, sup.lines()[-10:])
        t0 = time.monotonic()
        os.kill(sup.pid, signal.SIGKILL)
        assert sup.wait_for((FAILED,), 30) == FAILED
        detect_s = time.monotonic() - t0
        print(f"real vLLM SIGKILL while loading -> {sup.failure.kind} after {detect_s:.1f} s")
        assert "SIGKILL" in sup.failure.message or "killed" in sup.failure.message.lower()
        assert detect_s < 5.0
        _cleaned(sup, tree)  # the EngineCore the API server left behind was stopped too
    finally:
        for pid in _alive(tree):
            os.kill(pid, signal.SIGKILL)
        sup.stop(sigint_wait_s=1, sigterm_wait_s=1)
