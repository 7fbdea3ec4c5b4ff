"""``kvpilot serve`` with vLLM 0.34 on a desktop GPU: a capped launch, with the reason printed.

The GPU is the recorded ``rtx4090-desktop`` snapshot (Xorg, gnome-shell and Firefox hold 1.5
GiB, the card drives the display) replayed through the NVML stand-in, and the same snapshot
with the display and its processes removed. The stand-in ``vllm`` (tests/fakes/fake_vllm.py)
reports version 0.34.0 and fails with 0.34's all-memory hint (the line composed from the 0.34.0
wheel's _more_kv_cache_memory_hint template), so the run ends after the launch.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

from ports import free_port
from testpaths import DATA, REPO, TESTS

FAKE = TESTS / "fakes" / "fake_vllm.py"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"
SNAPSHOT = REPO / "resources" / "nvml_rtx4090-desktop.json"
NO_KV_034 = (
    "(EngineCore pid=4188) ERROR 12-06 10:41:07 [core.py:1510] ValueError: No available memory "
    "for the cache blocks. The extensible KV cache already takes all device memory left after "
    "the model and its activations; decrease `max_model_len` or `max_num_seqs`, or the model "
    "needs a device with more memory. See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def _fake(tmp_path: Path) -> Path:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def _serve(tmp_path: Path, snapshot: str) -> tuple[list[dict[str, Any]], list[str]]:
    log = tmp_path / "fail.log"
    log.write_text(NO_KV_034 + "\n")
    argv_file = tmp_path / "argv.json"
    env = dict(os.environ, KVPILOT_DATA_DIR=str(tmp_path / "data"),
               KVPILOT_CACHE_DIR=str(tmp_path / "cache"), KVPILOT_FAKE_NVML=snapshot,
               FAKE_VLLM_VERSION="0.34.0", FAKE_VLLM_MODE="fail", FAKE_VLLM_LOG=str(log),
               FAKE_VLLM_ARGV_FILE=str(argv_file))
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "serve", "--model", str(MODEL),
         "--vllm", str(_fake(tmp_path)), "--data-dir", str(tmp_path / "data"),
         "--json-events", "--max-model-len", "8192",
         "--port", str(free_port(19800))],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 1, proc.stderr[-2000:]
    return events, json.loads(argv_file.read_text())["argv"]


def test_desktop_gpu_launches_034_capped_and_says_why(tmp_path: Path) -> None:
    events, argv = _serve(tmp_path, "rtx4090-desktop")
    cap = next(e for e in events if e["event"] == "launch_cap")
    util = cap["gpu_memory_utilization"]
    assert util is not None and 0.7 < util < 0.9
    assert cap["headroom_bytes"] >= 1 << 30
    assert "drives a display" in cap["reason"] and "firefox" in cap["reason"]
    assert f"--gpu-memory-utilization {util:.2f}" in cap["reason"]
    assert argv[argv.index("--gpu-memory-utilization") + 1] == str(util)
    failure = next(e for e in events if e["event"] == "failure")
    assert failure["kind"] == "no_kv_memory" and "raise" not in failure["message"]
    # the cap may be lifted back to vLLM's default, never raised past it
    suggestions = [e for e in events if e["event"] == "suggestion"]
    assert suggestions
    for event in suggestions:
        util_change = event["changes"].get("gpu_memory_utilization", "absent")
        assert util_change in ("absent", None), event


def test_gpu_without_display_or_other_processes_leaves_the_utilization_unset(
        tmp_path: Path) -> None:
    data = json.loads(SNAPSHOT.read_text())
    dev = data["devices"][0]
    dev["display_mode"] = dev["display_active"] = 0
    dev["graphics_processes"] = []
    dev["memory"]["free"] += dev["memory"]["used"]
    dev["memory"]["used"] = 0
    dedicated = tmp_path / "dedicated.json"
    dedicated.write_text(json.dumps(data))
    events, argv = _serve(tmp_path, str(dedicated))
    cap = next(e for e in events if e["event"] == "launch_cap")
    assert cap["gpu_memory_utilization"] is None and cap["headroom_bytes"] == 0
    assert "left unset" in cap["reason"]
    assert "--gpu-memory-utilization" not in argv
