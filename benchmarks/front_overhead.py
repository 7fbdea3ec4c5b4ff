"""What the front costs: tokens/s through it against the same server direct, and the swap time.

1. throughput: one profile behind a front (``kvpilot.core.front``, uvicorn + httpx) running in
   its own process, as ``kvpilot front`` does; rounds of ``--concurrency`` streamed completions
   of ``--max-tokens`` tokens each (``ignore_eos``), sent alternately to the server direct and
   through the front, so that both see the same machine load; output tokens/s of each, and
   their ratio (goal: the front >= 0.97 of direct);
2. swap: a request for profile B while A runs on a front held to one loaded profile
   (``max_loaded=1``), from the request to B's answer, against a plain ``Supervisor`` stop of A
   and start of B until ready (the same servers, the same settings).

Runs the real vLLM CPU engine and the tiny test model (``tests/e2e/make_tiny_model.py``):

    .venv/bin/python benchmarks/front_overhead.py [--vllm PATH] [--model DIR] [--rounds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

import httpx

from kvpilot.core.app.settings import Profile
from kvpilot.core.base.plan import ServingSettings, settings_dict
from kvpilot.core.front.members import prepare_member, this_device
from kvpilot.core.front.pool import FrontOptions, Pool
from kvpilot.core.front.server import FrontServer
from kvpilot.core.runtimes.discovery import VllmRuntime, discover
from kvpilot.core.vllm.command import find_free_port
from kvpilot.core.vllm.supervisor import Supervisor

ROOT = Path(__file__).resolve().parents[1]
E2E_DATA = Path(os.environ.get("KVPILOT_TEST_DATA_DIR") or ROOT / ".cache" / "e2e-data")
TINY = ServingSettings(max_model_len=1024, max_num_seqs=4, kv_cache_memory_bytes=64 << 20,
                       enforce_eager=True, dtype="float32")
READY_S = 600.0
FRONT_KEY = "sk-bench"


def default_model() -> Path | None:
    for cache in (ROOT / ".cache" / "tiny-model", Path("/tmp/ci-base/.cache/tiny-model")):
        found = sorted(cache.glob("*/config.json"))
        if found:
            return found[0].parent
    return None


async def _one(client: httpx.AsyncClient, url: str, key: str, model: str,
               max_tokens: int) -> int:
    body = {"model": model, "prompt": "one two three four", "max_tokens": max_tokens,
            "ignore_eos": True, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    tokens = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body,
                             headers={"Authorization": f"Bearer {key}"}) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: {"):
                usage = json.loads(line[6:]).get("usage")
                if usage:
                    tokens = int(usage["completion_tokens"])
    return tokens


async def _round(url: str, key: str, model: str, concurrency: int, max_tokens: int) -> float:
    async with httpx.AsyncClient(timeout=None, trust_env=False) as client:
        began = time.perf_counter()
        counts = await asyncio.gather(*(_one(client, url, key, model, max_tokens)
                                        for _ in range(concurrency)))
        return sum(counts) / (time.perf_counter() - began)


def throughput(front_url: str, direct_url: str, direct_key: str, model: str, rounds: int,
               concurrency: int, max_tokens: int) -> tuple[list[float], list[float]]:
    """Paired rounds, direct and through the front, the order swapped every round."""
    asyncio.run(_round(direct_url, direct_key, model, concurrency, 8))  # warm both paths
    asyncio.run(_round(front_url, FRONT_KEY, model, concurrency, 8))
    direct, through = [], []
    for i in range(rounds):
        pair = [(direct, direct_url, direct_key), (through, front_url, FRONT_KEY)]
        for out, url, key in (pair if i % 2 == 0 else pair[::-1]):
            out.append(asyncio.run(_round(url, key, model, concurrency, max_tokens)))
    return direct, through


def _front_process(conn: Connection, vllm: str, model: str, work: str, names: tuple[str, ...],
                   max_loaded: int | None) -> None:
    """The front in its own process, as ``kvpilot front`` runs (its own interpreter and GIL):
    sends back its address and the servers' key, then serves until SIGTERM."""
    runtime = discover(vllm)
    device = this_device(runtime.version)
    members = [prepare_member(Profile(name=n, model_ref=model, served_model_name=n, plan=TINY,
                                      vllm_runtime=runtime.location), runtime, device,
                              Path(work)) for n in names]
    pool = Pool(members, Path(work), FrontOptions(max_loaded=max_loaded))
    server = FrontServer(pool, "127.0.0.1", find_free_port("127.0.0.1", 19800),
                         api_key=FRONT_KEY)
    conn.send((server.base_url, pool.key))
    server.run()


class FrontProcess:
    """A front in a child process (stopped by SIGTERM, every server it started with it)."""

    def __init__(self, vllm: str, model: Path, work: Path, names: tuple[str, ...],
                 max_loaded: int | None = None) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_front_process, args=(
            child, vllm, str(model), str(work), names, max_loaded))
        self.proc.start()
        self.url, self.key = parent.recv()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError("the front did not listen within 60 s")

    def status(self) -> dict:
        return httpx.get(f"{self.url}/front/status", timeout=10,
                         headers={"Authorization": f"Bearer {FRONT_KEY}"}).json()

    def ask(self, model: str) -> float:
        began = time.perf_counter()
        reply = httpx.post(f"{self.url}/v1/completions", timeout=READY_S, json={
            "model": model, "prompt": "one", "max_tokens": 2},
            headers={"Authorization": f"Bearer {FRONT_KEY}"})
        reply.raise_for_status()
        return time.perf_counter() - began

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.join(180)


def plain_swap(runtime: VllmRuntime, model: Path, work: Path) -> float:
    """Stop A and start B with a bare Supervisor, as a user without the front would."""
    from kvpilot.core.vllm.command import LaunchSpec

    def spec(name: str) -> LaunchSpec:
        return LaunchSpec(model=str(model), served_model_name=name, hf_offline=True,
                          port=find_free_port("127.0.0.1", 19900), **settings_dict(TINY))

    a = Supervisor(runtime, spec("a"), data_dir=work)
    a.start()
    assert a.wait_ready(READY_S), a.lines()[-10:]
    began = time.perf_counter()
    a.stop()
    b = Supervisor(runtime, spec("b"), data_dir=work)
    b.start()
    assert b.wait_ready(READY_S), b.lines()[-10:]
    seconds = time.perf_counter() - began
    b.stop()
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", default=str(E2E_DATA / "runtimes" / "0.32.0-cpu" / "bin"
                                              / "vllm"))
    parser.add_argument("--model", type=Path, default=default_model())
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=512)
    args = parser.parse_args()
    if args.model is None:
        parser.error("no tiny model found; build it with tests/e2e/make_tiny_model.py, "
                     "then pass --model DIR")
    runtime = discover(args.vllm)
    with tempfile.TemporaryDirectory(prefix="kvpilot-front-bench-") as tmp:
        work = Path(tmp)
        for sub in ("tmp", "cache", "config"):
            (work / sub).mkdir()
        os.environ.update(TMPDIR=str(work / "tmp"), VLLM_CACHE_ROOT=str(work / "cache"),
                          VLLM_CONFIG_ROOT=str(work / "config"))
        print(f"vLLM {runtime.version} ({runtime.location}), model {args.model}")

        front = FrontProcess(args.vllm, args.model, work, ("a",))
        try:
            start_s = front.ask("a")
            direct_url = front.status()["profiles"][0]["base_url"]
            direct, through = throughput(front.url, direct_url, front.key, "a", args.rounds,
                                         args.concurrency, args.max_tokens)
        finally:
            front.stop()
        d, t = statistics.median(direct), statistics.median(through)
        paired = statistics.median(b / a for a, b in zip(direct, through, strict=True))
        print(f"first request (cold start through the front): {start_s:.1f} s")
        print(f"throughput, {args.rounds} paired rounds of {args.concurrency} x "
              f"{args.max_tokens} streamed tokens (the front in its own process):")
        print(f"  direct        {d:8.1f} tokens/s (median)  rounds "
              f"{[round(x, 1) for x in direct]}")
        print(f"  through front {t:8.1f} tokens/s (median)  rounds "
              f"{[round(x, 1) for x in through]}")
        print(f"  ratio of medians {t / d:.3f}, median of paired ratios {paired:.3f} "
              "(goal >= 0.97)")

        front = FrontProcess(args.vllm, args.model, work, ("a", "b"), max_loaded=1)
        try:
            front.ask("a")
            swap_s = front.ask("b")
            last = front.status()["swaps"][-1]
        finally:
            front.stop()
        plain_s = plain_swap(runtime, args.model, work)
        print("swap of the tiny model, A running, a request for B:")
        print(f"  through the front  {swap_s:6.1f} s from the request to B's answer "
              f"(load {last['load_s']:.1f} s, made room: {', '.join(last['made_room'])})")
        print(f"  plain stop + start {plain_s:6.1f} s (Supervisor stop of A, start of B to "
              "ready)")
        print(f"  ratio {swap_s / plain_s:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
