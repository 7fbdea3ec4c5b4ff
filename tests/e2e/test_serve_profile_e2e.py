"""The headless autostart unit against the real vLLM CPU engine: ``kvpilot autostart enable
--headless`` writes the unit, and its ``ExecStart`` (``kvpilot serve --profile NAME``) run with
only the unit's environment, as systemd runs it, serves the profile of the settings file (API key
in the 0600 secrets fallback): ready, /v1/models only with the profile's key, the key in no argv,
output or log, and a clean stop on SIGTERM (what ``systemctl stop`` sends)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

import httpx
import psutil
from ports import free_port

from kvpilot.core.app import autostart
from kvpilot.core.app.settings import Profile, Settings, SettingsStore
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.runtimes.discovery import VllmRuntime

from .conftest import KV_CACHE_BYTES, READY_TIMEOUT_S, vllm_executable_for_tests
from .servekit import kvpilot_argv, serve_env, wait_event

KEY = "sk-e2e-profile-7f3a9c"


def test_serve_profile_headless(
    vllm_runtime: VllmRuntime, tiny_model: Path, vllm_scratch: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    data = tmp_path / "data"
    port = free_port(18600)
    plan = ServingSettings(max_model_len=1024, max_num_seqs=4, kv_cache_memory_bytes=KV_CACHE_BYTES,
                        enforce_eager=True, dtype="float32")
    exe, _ = vllm_executable_for_tests()
    profile = Profile(name="tiny cpu", model_ref=str(tiny_model), plan=plan, port=port,
                      api_key=KEY, vllm_runtime=str(exe))  # the profile picks the runtime
    store = SettingsStore(config)
    saved_env = {**serve_env(vllm_scratch, data), "KVPILOT_CONFIG_DIR": str(config),
                 "KVPILOT_SECRETS": "settings-file", "KVPILOT_API_KEY": "not-this-one"}
    store.save(Settings(profiles=(profile,), active_profile=profile.name))
    old_env = dict(os.environ)
    os.environ.update(saved_env)
    try:  # enabled from a shell that has a key in its environment: it must not be written
        autostart.enable(profile.name, headless=True, config_home=tmp_path / "xdg",
                         argv=kvpilot_argv()[:3], reload=False)
    finally:
        os.environ.clear()
        os.environ.update(old_env)
    unit = (tmp_path / "xdg" / "systemd" / "user" / autostart.UNIT_NAME).read_text()
    assert KEY not in unit and "not-this-one" not in unit
    lines = unit.splitlines()
    argv = [a.replace("%%", "%").replace("$$", "$") for a in
            shlex.split(next(ln for ln in lines if ln.startswith("ExecStart="))[10:])]
    assert argv[-3:] == ["serve", "--profile", "tiny cpu"]
    # the unit's environment and nothing else (vLLM's scratch folders aside: two cores, tmp)
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)),
           **{k: v for k, v in serve_env(vllm_scratch, data).items()
              if k in ("TMPDIR", "VLLM_CACHE_ROOT", "VLLM_CONFIG_ROOT")}}
    for ln in lines:
        if ln.startswith("Environment="):
            name, _, value = shlex.split(ln[12:])[0].partition("=")
            env[name] = value
    assert env["KVPILOT_CONFIG_DIR"] == str(config) and env["KVPILOT_DATA_DIR"] == str(data)
    argv += ["--json-events"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        events = wait_event(proc, "ready", READY_TIMEOUT_S)
        assert events[0]["event"] in ("profile", "vllm_support")
        assert any(e["event"] == "profile" and e["profile"] == "tiny cpu" for e in events)
        url = f"http://127.0.0.1:{port}/v1/models"
        assert httpx.get(url, timeout=10).status_code == 401  # the profile's key is in force
        reply = httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert reply.status_code == 200
        assert reply.json()["data"][0]["id"]
        launch = next(e for e in events if e["event"] == "launch")
        child = psutil.Process(launch["pid"])
        tree = [child, *child.children(recursive=True)]
        for p in [psutil.Process(proc.pid), *tree]:
            assert KEY not in " ".join(p.cmdline()), p.cmdline()
        assert KEY not in json.dumps(events)
        # a load test against it is kept with its run record (the key from the environment)
        bench = subprocess.run(
            kvpilot_argv("bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "1,2",
                         "--requests", "2", "--prompt-tokens", "16", "--output-tokens", "8",
                         "--api-key-env", "BENCH_KEY", "--json"),
            env={**env, "BENCH_KEY": KEY}, capture_output=True, text=True, timeout=300,
            check=False)
        assert bench.returncode == 0, bench.stderr[-2000:]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    stopped = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert stopped and stopped[-1]["event"] == "stopped" and stopped[-1]["clean"] is True
    assert KEY not in out and KEY not in err
    for p in tree:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    logs = [f for f in data.rglob("*.log") if f.is_file()]
    assert logs, "serve kept no log"
    assert all(KEY not in f.read_text(errors="replace") for f in logs)
    listed = subprocess.run(kvpilot_argv("runs", "--json"), env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    runs = json.loads(listed.stdout)["runs"]
    assert len(runs) == 1
    run = runs[0]
    assert run["state"] == "stopped" and run["profile"] == "tiny cpu" and run["source"] == "cli"
    assert run["settings"]["max_model_len"] == 1024 and run["runtime_version"].startswith("0.32")
    assert run["reported"]["kv_cache_tokens"] > 0 and run["startup_s"] > 0
    assert run["predicted"]["kv_cache_tokens"] > 0  # the plan of the profile's settings
    (test,) = run["load_tests"]
    assert [lv["concurrency"] for lv in test["levels"]] == [1, 2]
    assert all(lv["output_tokens_per_s"] > 0 and lv["ttft_p50_s"] > 0 for lv in test["levels"])
    assert KEY not in listed.stdout
    shown = subprocess.run(kvpilot_argv("runs", "show", run["id"]), env=env,
                           capture_output=True, text=True, timeout=60, check=True)
    assert "2 users:" in shown.stdout and "stopped" in shown.stdout
