"""`kvpilot plan --measure` on the real CPU engine: dry run with dummy weights, then later plans
for the same key say ``source: measured`` and use what vLLM reported."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from kvpilot.core.base.versions import Release

from .servekit import kvpilot_argv


def _kvpilot(args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        kvpilot_argv(*args),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def test_measure_then_plan_uses_the_measurement(vllm_runtime, tiny_model, launch_spec, tmp_path):
    # vLLM's scratch folders (TMPDIR short enough for ZeroMQ ipc paths) as for every e2e launch
    env = {
        **os.environ,
        **launch_spec().extra_env,
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
    # the release is stored normalised, the build variant beside it
    assert entry["key"]["vllm_version"] == Release.parse(vllm_runtime.version).number
    assert entry["key"]["vllm_variant"] == "cpu"

    after = _kvpilot([*plan_args, "--vllm-version", vllm_runtime.version], env, 120)
    assert after.returncode == 0, after.stderr
    plan = json.loads(after.stdout)
    kv_term = {t["name"]: t for t in plan["terms"]}["kv_cache"]
    assert kv_term["source"] == "measured"
    assert entry["measured"]["measured_at"] in kv_term["note"]
    assert plan["kv_cache_tokens"] == entry["measured"]["kv_cache_tokens"]
    assert plan["inputs"]["kv_source"] == "measured"
    assert Path(entry["key"]["model_id"]).name == Path(tiny_model).name
