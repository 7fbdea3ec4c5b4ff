"""LoRA adapters, speculative decoding and the pooling runner on the real CPU engine (vLLM
0.32.0+cpu), planned first and then launched by ``kvpilot serve`` with the same flags.

* an adapter written here (PEFT's layout, no library) is served with ``--enable-lora`` and
  answers a completion under its own name; the plan sizes its slots from vLLM's stacks;
* ngram speculative decoding drafts tokens (vLLM's spec-decode counters move) and keeps the KV
  cache as it is; a draft model's layers join the KV cache, so the same memory holds half the
  tokens, and a KV budget that one request fills without the draft is predicted to fail with
  it, and fails in vLLM with the length kvpilot predicted;
* ``--runner pooling`` serves embeddings with the KV cache the plan predicted.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx

from kvpilot.core.base import failures

from .conftest import READY_TIMEOUT_S
from .make_tiny_adapter import write_adapter
from .servekit import kvpilot_argv, serve_argv, serve_env, start_serve, wait_event

#: vLLM's CPU backend keeps 128-token blocks; the plan uses the same
CPU_FLAGS = ("--block-size", "128")


def _plan(tiny_model: Path, data_dir: Path, *flags: str, kv: str = "64M") -> dict[str, Any]:
    proc = subprocess.run(
        kvpilot_argv("plan", "--model", str(tiny_model), "--gpu", "cpu", "--vllm-version",
                     "0.32.0+cpu", "--max-model-len", "1024", "--max-num-seqs", "4",
                     "--kv-cache-memory-bytes", kv, "--enforce-eager", "--dtype", "float32",
                     *CPU_FLAGS, *flags, "--json"),
        capture_output=True, text=True, timeout=120, check=False,
        env={**serve_env(data_dir, data_dir)},
    )
    assert proc.returncode in (0, 1), proc.stderr  # 1: the plan does not fit
    return json.loads(proc.stdout)


def _stop(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def _capacity(events: list[dict[str, Any]]) -> dict[str, Any]:
    return [e for e in events if e["event"] == "capacity" and e.get("kv_cache_tokens")][-1]


def test_an_adapter_made_here_is_served_under_its_name(
    vllm_runtime: Any, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    adapter = write_adapter(tmp_path / "tiny-adapter", str(tiny_model), rank=8)
    lora = ("--enable-lora", "--max-loras", "2", "--max-lora-rank", "8")
    plan = _plan(tiny_model, tmp_path, *lora)
    assert plan["verdict"] == "fits"
    # one slot, float32 (--dtype float32, lora_dtype auto): h 128, q 128, kv 64, i 256, vocab 1024
    r, h, q, kvd, i, vocab = 8, 128, 128, 64, 256, 1024
    layer = (3 * r * h + (q + 2 * kvd) * r) + (r * q + h * r) + (2 * r * h + 2 * i * r) \
        + (r * i + h * r)
    assert plan["inputs"]["lora_bytes_per_slot"] == (2 * layer + 2 * (r * h + vocab * r)) * 4
    # the adapter reaches vLLM as an extra argument, after the events flag and "--"
    argv = serve_argv(vllm_runtime.location, tiny_model, tmp_path, *CPU_FLAGS, *lora,
                      "--json-events", "--", "--lora-modules", f"tiny-adapter={adapter}")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=serve_env(vllm_scratch, tmp_path))
    try:
        events = wait_event(proc, "ready", READY_TIMEOUT_S)
        command = next(e for e in events if e.get("command"))["command"]
        assert "--enable-lora --max-loras 2 --max-lora-rank 8" in command
        base = events[-1]["base_url"]
        names = [m["id"] for m in httpx.get(base + "/v1/models", timeout=10).json()["data"]]
        assert "tiny-adapter" in names
        reply = httpx.post(base + "/v1/completions", timeout=60, json={
            "model": "tiny-adapter", "prompt": "the river", "max_tokens": 4})
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 4
    finally:
        tail = _stop(proc)
    assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True


def test_ngram_drafts_and_a_draft_models_layers_take_kv_room(
    vllm_runtime: Any, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    ngram = json.dumps({"method": "ngram", "num_speculative_tokens": 2,
                        "prompt_lookup_max": 3, "prompt_lookup_min": 1})
    draft = json.dumps({"method": "draft_model", "model": str(tiny_model),
                        "num_speculative_tokens": 2})
    plan_ngram = _plan(tiny_model, tmp_path, "--speculative-config", ngram)
    plan_draft = _plan(tiny_model, tmp_path, "--speculative-config", draft)
    assert plan_ngram["verdict"] == plan_draft["verdict"] == "fits"
    # the draft (the tiny model itself) doubles the KV a token takes
    assert plan_draft["kv_bytes_per_token"] == 2 * plan_ngram["kv_bytes_per_token"]

    reported = {}
    for name, config in (("ngram", ngram), ("draft", draft)):
        proc = start_serve(serve_argv(vllm_runtime.location, tiny_model, tmp_path / name,
                                      *CPU_FLAGS, "--speculative-config", config),
                           serve_env(vllm_scratch, tmp_path / name))
        try:
            events = wait_event(proc, "ready", READY_TIMEOUT_S)
            base = events[-1]["base_url"]
            reply = httpx.post(base + "/v1/completions", timeout=60, json={
                "model": str(tiny_model), "prompt": "one two three one two three one two",
                "max_tokens": 12, "temperature": 0})
            assert reply.status_code == 200, reply.text
            metrics = httpx.get(base + "/metrics", timeout=10).text
            drafted = [line for line in metrics.splitlines()
                       if line.startswith("vllm:spec_decode_num_draft_tokens_total")]
            assert drafted and float(drafted[0].rsplit(" ", 1)[1]) > 0
            reported[name] = _capacity(events)["kv_cache_tokens"]
        finally:
            tail = _stop(proc)
        assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True
    # what vLLM logged ("KV cache size: N tokens") is what the plans said
    assert reported["ngram"] == plan_ngram["kv_cache_tokens"]
    assert reported["draft"] == plan_draft["kv_cache_tokens"] == reported["ngram"] // 2


def test_a_draft_that_overflows_the_kv_cache_is_predicted_and_vllm_agrees(
    vllm_runtime: Any, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    # 1.5 MiB: twelve 128-token blocks of the tiny model's float32 KV, six with its draft;
    # one 1,024-token request needs eight
    kv = "1572864"
    draft = json.dumps({"method": "draft_model", "model": str(tiny_model),
                        "num_speculative_tokens": 2})
    plain = _plan(tiny_model, tmp_path, kv=kv)
    with_draft = _plan(tiny_model, tmp_path, "--speculative-config", draft, kv=kv)
    assert plain["verdict"] == "fits"
    assert with_draft["verdict"] == "does_not_fit"
    assert with_draft["failure"]["kind"] == failures.KV_CACHE_TOO_SMALL
    predicted_len = with_draft["failure"]["estimated_max_model_len"]

    argv = serve_argv(vllm_runtime.location, tiny_model, tmp_path, *CPU_FLAGS,
                      "--kv-cache-memory-bytes", kv, "--speculative-config", draft)
    proc = start_serve(argv, serve_env(vllm_scratch, tmp_path), keep_stderr=True)
    try:
        events = wait_event(proc, "failure", 2 * READY_TIMEOUT_S)
    finally:
        _stop(proc)
    failure = events[-1]
    assert failure["kind"] == failures.KV_CACHE_TOO_SMALL
    assert failure["estimated_max_model_len"] == predicted_len


def test_the_pooling_runner_serves_embeddings_with_the_planned_kv_cache(
    vllm_runtime: Any, tiny_model: Path, tmp_path: Path, vllm_scratch: Path
) -> None:
    plan = _plan(tiny_model, tmp_path, "--runner", "pooling")
    generate = _plan(tiny_model, tmp_path)
    assert plan["verdict"] == "fits" and plan["inputs"]["runner"] == "pooling"
    # no sampler in the profile run; the decoder's KV cache is sized as for generation
    assert plan["kv_bytes_per_token"] == generate["kv_bytes_per_token"]
    proc = start_serve(serve_argv(vllm_runtime.location, tiny_model, tmp_path, *CPU_FLAGS,
                                  "--runner", "pooling"), serve_env(vllm_scratch, tmp_path))
    try:
        events = wait_event(proc, "ready", READY_TIMEOUT_S)
        command = next(e for e in events if e.get("command"))["command"]
        assert "--runner pooling" in command
        reply = httpx.post(events[-1]["base_url"] + "/v1/embeddings", timeout=60, json={
            "model": str(tiny_model), "input": "the river"})
        assert reply.status_code == 200, reply.text
        assert len(reply.json()["data"][0]["embedding"]) == 128  # the tiny model's hidden size
        assert _capacity(events)["kv_cache_tokens"] == plan["kv_cache_tokens"]
    finally:
        tail = _stop(proc)
    assert tail[-1]["event"] == "stopped" and tail[-1]["clean"] is True
