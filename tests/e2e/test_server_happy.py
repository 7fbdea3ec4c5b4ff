"""Happy path on the shared real server: phases, readiness, capacity, requests, files."""

from __future__ import annotations

import json
from typing import Any

import httpx

from kvpilot.core.vllm import logparse
from kvpilot.core.vllm.supervisor import READY, StateEvent, iter_states


def test_started_through_the_phases_to_ready(vllm_server: Any) -> None:
    sup = vllm_server.supervisor
    assert sup.state == READY
    events = sup.events()
    assert list(iter_states(events))[:2] == ["starting", "ready"]
    phases = [e.phase for e in events if isinstance(e, logparse.PhaseEvent)]
    assert logparse.LOADING_WEIGHTS in phases
    assert phases[-1] == logparse.STARTING_API
    assert phases.index(logparse.LOADING_WEIGHTS) < phases.index(logparse.STARTING_API)
    ready = next(e for e in events if isinstance(e, StateEvent) and e.state == READY)
    assert ready.phase == logparse.STARTING_API


def test_capacity_from_the_log_and_the_metrics(vllm_server: Any) -> None:
    cap = vllm_server.supervisor.capacity
    # 64 MiB of fp32 KV for this model (1 KiB per token) on the CPU backend
    assert cap.kv_cache_tokens == 65_536
    assert cap.concurrency_for_len == 1024
    assert cap.max_concurrency == 64.0
    assert cap.kv_cache_memory_bytes == 64 << 20
    assert cap.block_size is not None and cap.num_blocks == 65_536 // cap.block_size
    assert set(cap.sources) == {"log", "metrics"}


def test_completion(vllm_server: Any) -> None:
    r = httpx.post(
        vllm_server.base_url + "/v1/completions",
        json={"model": vllm_server.model_name, "prompt": "the river", "max_tokens": 8},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == 8
    assert isinstance(body["choices"][0]["text"], str)


def test_streamed_chat_completion(vllm_server: Any) -> None:
    chunks: list[dict[str, Any]] = []
    with httpx.stream(
        "POST",
        vllm_server.base_url + "/v1/chat/completions",
        json={
            "model": vllm_server.model_name,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 6,
            "stream": True,
        },
        timeout=60,
    ) as r:
        assert r.status_code == 200
        done = False
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            if data == "[DONE]":
                done = True
                break
            chunks.append(json.loads(data))
    assert done
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks if c["choices"]]
    assert len([d for d in deltas if d]) >= 1
    assert chunks[0]["model"] == vllm_server.model_name


def test_log_file_and_pidfile(vllm_server: Any) -> None:
    sup = vllm_server.supervisor
    assert sup.log_path is not None and sup.log_path.parent == vllm_server.data_dir / "logs"
    text = sup.log_path.read_text()
    assert "Starting vLLM server on" in text
    assert text.splitlines()[0].startswith("# ")  # the redacted command
    # kvpilot's own readiness and telemetry polls stay out of the access log (0.32 has the
    # filter), while the server did answer them
    assert "--disable-access-log-for-endpoints /health,/metrics" in text.splitlines()[0]
    assert "GET /health" not in text and "GET /metrics" not in text
    pid = json.loads((vllm_server.data_dir / "servers" / f"{vllm_server.port}.json").read_text())
    assert pid["pid"] == vllm_server.pid and pid["port"] == vllm_server.port
    assert len(sup.tree_pids()) >= 3  # API server, EngineCore, Worker (+ resource tracker)
