"""The loop that makes a plan exact, on the real CPU engine: ``kvpilot serve`` of a Hub id from a
local Hugging Face cache (offline) records what vLLM reported; a later ``kvpilot plan`` of the
same Hub id with the same serving flags says ``measured`` and predicts that KV memory.

No GPU here: both commands plan for this machine's device, vLLM's CPU backend (the RAM).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kvpilot.core.runtimes.discovery import VllmRuntime

from .conftest import READY_TIMEOUT_S
from .servekit import TINY_SERVING_FLAGS, kvpilot_argv, serve_env, start_serve, wait_event

pytestmark = pytest.mark.e2e

REPO_ID = "kvpilot-test/tiny-llama"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SERVING_FLAGS = TINY_SERVING_FLAGS


def hub_cache_with(model_dir: Path, hf_home: Path) -> Path:
    """Lay ``model_dir`` out as huggingface_hub caches a download of :data:`REPO_ID`."""
    repo = hf_home / "hub" / ("models--" + REPO_ID.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.is_file():
            shutil.copy2(f, snapshot / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return snapshot


def test_serve_by_hub_id_then_plan_says_measured(
    vllm_runtime: VllmRuntime, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    data_dir = tmp_path / "data"
    snapshot = hub_cache_with(tiny_model, tmp_path / "hf")
    env = serve_env(vllm_scratch, data_dir)
    env.update(
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        KVPILOT_VLLM=vllm_runtime.location,
        KVPILOT_FAKE_NVML="no-driver",  # no usable GPU: the CPU backend is the device
    )
    env.pop("HF_HUB_CACHE", None)

    before = subprocess.run(
        kvpilot_argv("plan", "--model", REPO_ID, *SERVING_FLAGS, "--json"),
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert before.returncode == 0, before.stderr
    predicted = json.loads(before.stdout)
    assert predicted["inputs"]["gpu_name"] == "cpu"
    assert {t["name"]: t["source"] for t in predicted["terms"]}["kv_cache"] == "user"

    proc = start_serve(
        kvpilot_argv("serve", "--model", REPO_ID, "--data-dir", str(data_dir), *SERVING_FLAGS),
        env, keep_stderr=True,
    )
    try:
        events = wait_event(proc, "ready", READY_TIMEOUT_S)
        launch = next(e for e in events if e["event"] == "launch")
        assert str(snapshot) in launch["command"]  # vLLM got the cached snapshot, offline
        store_file = data_dir / "measurements.json"
        deadline = time.monotonic() + 60
        while not store_file.exists() and time.monotonic() < deadline:
            time.sleep(0.5)  # recorded once the ready server's /metrics was read
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    capacities = [json.loads(line) for line in out.splitlines() if '"capacity"' in line]
    reported = [c for c in events + capacities if c.get("event") == "capacity"]
    assert reported, "vLLM reported no capacity"

    store = json.loads((data_dir / "measurements.json").read_text())
    (entry,) = store["entries"]
    key = entry["key"]
    assert key["model_id"] == REPO_ID  # not the snapshot folder
    assert key["vllm_version"] == "0.32.0" and key["vllm_variant"] == "cpu"
    assert key["gpu_name"] == "cpu"
    measured_kv = entry["measured"]["available_kv_bytes"]
    assert measured_kv == 64 << 20

    after = subprocess.run(
        kvpilot_argv("plan", "--model", REPO_ID, *SERVING_FLAGS, "--json"),
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert after.returncode == 0, after.stderr
    plan = json.loads(after.stdout)
    terms = {t["name"]: t for t in plan["terms"]}
    assert terms["kv_cache"]["source"] == "measured"
    assert entry["measured"]["measured_at"] in terms["kv_cache"]["note"]
    assert abs(plan["available_kv_bytes"] - measured_kv) <= 0.01 * measured_kv
    assert plan["kv_cache_tokens"] == entry["measured"]["kv_cache_tokens"]
    assert plan["inputs"]["kv_source"] == "measured"
