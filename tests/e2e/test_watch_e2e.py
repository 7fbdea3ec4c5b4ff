"""`kvpilot watch` against a real vLLM CPU server: identity, capacity, and a server that dies."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

from kvpilot.core.app.watch import ServerWatch

from .conftest import READY_TIMEOUT_S
from .servekit import kvpilot_argv


def _watch_cli(url: str, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "KVPILOT_DATA_DIR": os.environ.get("KVPILOT_DATA_DIR", "/tmp")}
    return subprocess.Popen(
        kvpilot_argv("watch", "--url", url, "--json", "--seconds", str(seconds),
                     "--interval", "0.5"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_watch_a_server_that_dies_mid_watch(vllm_runtime, launch_spec, tmp_path):
    from kvpilot.core.vllm.supervisor import Supervisor

    sup = Supervisor(vllm_runtime, launch_spec(), data_dir=tmp_path)
    sup.start()
    try:
        assert sup.wait_ready(READY_TIMEOUT_S), "\n".join(sup.lines()[-30:])
        proc = _watch_cli(sup.base_url, 12.0)
        time.sleep(5.0)
        report = sup.stop()
        assert report.clean
        out, err = proc.communicate(timeout=60)
    finally:
        sup.stop()
    assert proc.returncode == 0, err
    samples = [json.loads(line) for line in out.splitlines()]
    connected = [s for s in samples if s["connected"]]
    gaps = [s for s in samples if not s["connected"]]
    assert connected and gaps, samples
    assert connected[0]["version"].startswith(vllm_runtime.version.split("+")[0])
    assert connected[0]["model"] and connected[0]["capacity"]["reported_kv_tokens"] > 0
    assert gaps[-1]["error"] and gaps[-1]["t_s"] > connected[-1]["t_s"]
    assert samples[-1]["t_s"] <= 12.5


def test_watch_the_real_server_reports_identity_and_capacity(vllm_server):
    from kvpilot.core.vllm.client import LoadTestConfig, run_load_test

    # the shared server runs the tiny checkpoint with --dtype float32
    watch = ServerWatch(vllm_server.base_url, timeout_s=10.0, dtype="float32")
    try:
        ident = watch.start()
        assert ident.model_id == vllm_server.model_name
        assert ident.max_model_len == 1024
        assert ident.version and ident.version[0].isdigit()
        assert watch.model is not None  # the tiny checkpoint's config.json is local
        first = watch.poll()
        done = threading.Event()

        def load() -> None:
            run_load_test(LoadTestConfig(
                base_url=vllm_server.base_url, concurrency_levels=(4,), prompt_tokens=512,
                output_tokens=192, requests_per_level=8, warmup_requests=0,
                request_timeout_s=120.0))
            done.set()

        threading.Thread(target=load, daemon=True).start()
        busy = []
        while not done.wait(0.05):
            busy.append(watch.poll())
        time.sleep(1.0)
        last = watch.poll()
    finally:
        watch.close()
    assert first.connected and first.capacity is not None
    cap = first.capacity
    assert cap.reported.kv_bytes == 64 << 20
    assert cap.reported.kv_cache_tokens and cap.predicted_kv_tokens
    # kvpilot's KV layout of the tiny model reproduces vLLM's token count from its KV memory
    assert cap.token_error_frac is not None and abs(cap.token_error_frac) <= 0.02, cap
    assert cap.predicted_kv_tokens == cap.reported.kv_cache_tokens
    assert any((s.values.get("running") or 0) > 0 for s in busy)
    assert max((s.values.get("generation_tokens_per_s") or 0) for s in [*busy, last]) > 0
    assert watch.gaps == 0
