"""`kvpilot plan --measure` on the real CPU engine: dry run with dummy weights, then later plans
for the same key say ``source: measured`` and use what vLLM reported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _kvpilot(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def _scratch_env(root: Path) -> dict[str, str]:
    """vLLM's temporary, cache and config folders inside the test's own folder."""
    for sub in ("tmp", "cache", "config"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return {
        "TMPDIR": str(root / "tmp"),
        "VLLM_CACHE_ROOT": str(root / "cache"),
        "VLLM_CONFIG_ROOT": str(root / "config"),
    }


def test_measure_then_plan_uses_the_measurement(vllm_runtime, tiny_model, tmp_path):
    # ZeroMQ ipc paths must stay under 107 characters: keep vLLM's TMPDIR short
    scratch = Path(tempfile.mkdtemp(prefix="kvp-", dir="/tmp"))
    try:
        _measure_then_plan(vllm_runtime, tiny_model, tmp_path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _measure_then_plan(vllm_runtime, tiny_model, tmp_path: Path, scratch: Path) -> None:
    env = {
        **os.environ,
        **_scratch_env(scratch),
        "KVPILOT_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }
    runtime = vllm_runtime.argv_prefix[0]
    plan_args = [
        "plan",
        "--model",
        str(tiny_model),
        "--gpu-total-mib",
        "24000",
        "--kv-cache-memory-bytes",
        "64M",
        "--max-model-len",
        "1024",
        "--max-num-seqs",
        "4",
        "--enforce-eager",
        "--json",
    ]
    before = _kvpilot([*plan_args, "--vllm-version", vllm_runtime.version], env, 120)
    assert before.returncode == 0, before.stderr
    predicted = json.loads(before.stdout)
    assert {t["name"]: t["source"] for t in predicted["terms"]}["kv_cache"] == "user"

    measured = _kvpilot([*plan_args, "--measure", "--vllm", runtime], env, 600)
    assert measured.returncode == 0, measured.stderr[-3000:]
    store = json.loads((tmp_path / "data" / "measurements.json").read_text())
    (entry,) = store["entries"]
    assert entry["measured"]["source"] == "dry_run"
    assert entry["measured"]["kv_cache_tokens"] > 0
    assert entry["key"]["vllm_version"] == vllm_runtime.version

    after = _kvpilot([*plan_args, "--vllm-version", vllm_runtime.version], env, 120)
    assert after.returncode == 0, after.stderr
    plan = json.loads(after.stdout)
    kv_term = {t["name"]: t for t in plan["terms"]}["kv_cache"]
    assert kv_term["source"] == "measured"
    assert entry["measured"]["measured_at"] in kv_term["note"]
    assert plan["kv_cache_tokens"] == entry["measured"]["kv_cache_tokens"]
    assert plan["inputs"]["kv_source"] == "measured"
    assert Path(entry["key"]["model_id"]).name == Path(tiny_model).name
