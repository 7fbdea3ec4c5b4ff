"""GPU-only start-up failures through ``kvpilot serve`` and the supervisor, end to end.

The stand-in ``vllm`` (tests/fakes/fake_vllm.py, a real child process) prints recorded vLLM lines:
a CUDA-graph capture that runs out of memory (V2 model runner, FULL graphs) and a negative KV
budget (0.16). ``kvpilot serve`` runs as a subprocess with ``--json-events``: the failure is
classified from the log, the fallbacks come from the fit engine with their predicted effect, and
``--auto-fallback`` relaunches with the best one, which the stand-in then serves.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from ports import free_port
from testpaths import DATA, TESTS

from kvpilot.core.base import failures

FAKE = TESTS / "fakes" / "fake_vllm.py"
LOGS = DATA / "supervisor"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _serve(fake: Path, tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    full = dict(os.environ)
    full.update(env, KVPILOT_DATA_DIR=str(tmp_path / "data"),
                KVPILOT_CACHE_DIR=str(tmp_path / "cache"))
    argv = [
        sys.executable, "-m", "kvpilot.core.cli", "serve", "--model", str(MODEL),
        "--vllm", str(fake), "--data-dir", str(tmp_path / "data"),
        "--gpu", "RTX 4090", "--gpu-total-mib", "24564", "--json-events",
        "--port", str(free_port(19700)), *args,
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=full)


def _events(proc: subprocess.Popen[str], until: str, timeout_s: float = 90) -> list[dict[str, Any]]:
    assert proc.stdout is not None
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        events.append(json.loads(line))
        if events[-1]["event"] == until:
            return events
    raise AssertionError(f"no {until!r} event; got {events[-10:]}")


def test_graph_capture_oom_then_auto_fallback_serves(fake_vllm: Path, tmp_path: Path) -> None:
    env = {
        "FAKE_VLLM_VERSION": "0.33.0",
        "FAKE_VLLM_MODE": "fail",
        "FAKE_VLLM_LOG": str(LOGS / "cuda_oom_graph_capture.log"),
        # any fallback that shrinks or drops the graphs, or lowers the utilization, starts
        "FAKE_VLLM_FAIL_UNLESS": r"--max-cudagraph-capture-size|--compilation-config|"
        r"--enforce-eager|--gpu-memory-utilization",
    }
    proc = _serve(fake_vllm, tmp_path, env, "--max-model-len", "8192", "--max-num-seqs", "64",
                  "--auto-fallback")
    try:
        events = _events(proc, "ready")
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    failure = next(e for e in events if e["event"] == "failure")
    assert failure["kind"] == failures.CUDA_OOM_GRAPHS
    assert failure["details"]["cudagraph_mode"] == "FULL"
    assert (failure["details"]["graphs_captured"], failure["details"]["graphs_total"]) == (20, 35)
    assert failure["details"]["device_free_bytes"] == 2_031_616
    fallback = next(e for e in events if e["event"] == "fallback")
    assert fallback["kind"] == failures.CUDA_OOM_GRAPHS
    assert "CUDA graphs" in fallback["description"] and "GiB" in fallback["description"]
    assert set(fallback["changes"]) & {
        "max_cudagraph_capture_size", "cudagraph_mode", "enforce_eager", "gpu_memory_utilization"}
    launches = [e for e in events if e["event"] == "launch"]
    assert len(launches) == 2
    assert "--max-cudagraph-capture-size 64" in launches[1]["command"]
    states = [e["state"] for e in events if e["event"] == "state"]
    assert states == ["starting", "failed", "starting", "ready"]
    tail = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True


def test_negative_budget_lists_fallbacks_with_their_effect(fake_vllm: Path, tmp_path: Path) -> None:
    env = {
        "FAKE_VLLM_VERSION": "0.16.1",
        "FAKE_VLLM_MODE": "fail",
        "FAKE_VLLM_LOG": str(LOGS / "negative_kv_budget.log"),
    }
    proc = _serve(fake_vllm, tmp_path, env, "--max-model-len", "8192",
                  "--gpu-memory-utilization", "0.75")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    events = [json.loads(x) for x in out.splitlines() if x.strip()]
    failure = next(e for e in events if e["event"] == "failure")
    assert failure["kind"] == failures.NEGATIVE_KV_BUDGET
    assert failure["details"]["available_kv_bytes"] == round(-1.25 * (1 << 30))
    assert "-1.25 GiB" in failure["message"]
    suggestions = [e for e in events if e["event"] == "suggestion"]
    assert suggestions, events[-5:]
    # the window's options too: smaller checkpoints of the family, and a utilization sized on
    # vLLM's own figure
    first = next(e for e in suggestions if "gpu_memory_utilization" in e["changes"])
    assert first["changes"]["gpu_memory_utilization"] > 0.75
    assert any(e["changes"].get("model", "").endswith("GPTQ-Int4") for e in suggestions)
    assert "KV" in first["description"] and "GiB" in first["description"]
    assert f"vLLM failed ({failures.NEGATIVE_KV_BUDGET})" in err
    assert not [e for e in events if e["event"] == "vllm_support"]  # 0.16 is in the range


def test_a_newer_vllm_is_named_and_its_unknown_failure_quoted(
    fake_vllm: Path, tmp_path: Path
) -> None:
    env = {
        "FAKE_VLLM_VERSION": "0.41.0",
        "FAKE_VLLM_MODE": "fail",
        "FAKE_VLLM_LOG": str(LOGS / "unknown_failure_newer_release.log"),
    }
    proc = _serve(fake_vllm, tmp_path, env, "--max-model-len", "8192")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 1, err
    events = [json.loads(x) for x in out.splitlines() if x.strip()]
    support = next(e for e in events if e["event"] == "vllm_support")
    assert support["version"] == "0.41.0"
    failure = next(e for e in events if e["event"] == "failure")
    assert failure["kind"] == failures.UNKNOWN
    quoted = "PlannerError: the fused MoE planner needs 3 GiB of scratch space"
    assert quoted in failure["message"]
    assert quoted in err


def test_auto_fallback_walks_the_options_until_one_starts(fake_vllm: Path, tmp_path: Path) -> None:
    """Only eager mode fixes this capture OOM, and eager mode is not the first option: the
    automatic fallbacks go on past the first (each launch different from every earlier one)
    until the one that starts."""
    env = {
        "FAKE_VLLM_VERSION": "0.33.0",
        "FAKE_VLLM_MODE": "fail",
        "FAKE_VLLM_LOG": str(LOGS / "cuda_oom_graph_capture.log"),
        "FAKE_VLLM_FAIL_UNLESS": r"--enforce-eager",
    }
    proc = _serve(fake_vllm, tmp_path, env, "--max-model-len", "8192", "--max-num-seqs", "64",
                  "--auto-fallback")
    try:
        events = _events(proc, "ready", timeout_s=240)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    taken = [e for e in events if e["event"] == "fallback"]
    assert len(taken) >= 2, taken
    launches = [e["command"] for e in events if e["event"] == "launch"]
    assert len(launches) == len(taken) + 1
    assert len(set(launches)) == len(launches)  # nothing launched twice
    assert "--enforce-eager" in launches[-1]
    assert not any("--enforce-eager" in c for c in launches[:-1])
