"""Supervisor latencies and idle cost, printed.

1. ready latency: from the moment the server answers ``/health`` (the stand-in records when it
   starts listening and when it first answered 200) to our ``ready`` event (goal <= 0.3 s);
2. failure latency: from the failing log line to the ``failed`` event, with vLLM exiting and with
   the process lingering and ignoring SIGTERM (goal <= 0.5 s);
3. supervisor CPU while idle and ready (goal < 0.5 % of one core).

Uses the stand-in ``tests/fakes/fake_vllm.py`` replaying real vLLM log lines, so the numbers are the
supervisor's own. ``--real PATH/TO/vllm --model DIR`` also measures idle CPU next to a real server.

    .venv/bin/python benchmarks/supervisor_latency.py [--runs 10] [--idle-s 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from kvpilot.core.runtimes.discovery import VllmRuntime, discover
from kvpilot.core.vllm.command import LaunchSpec, find_free_port
from kvpilot.core.vllm.supervisor import FAILED, READY, StateEvent, Supervisor

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fakes" / "fake_vllm.py"
DATA = ROOT / "tests" / "data" / "supervisor"


def fake_runtime() -> VllmRuntime:
    return VllmRuntime((sys.executable, str(FAKE)), "0.32.0", "env", str(FAKE))


def state_event(sup: Supervisor, state: str) -> StateEvent:
    return next(e for e in sup.events() if isinstance(e, StateEvent) and e.state == state)


def run_fake(env: dict[str, str], work: Path) -> tuple[Supervisor, dict[str, float]]:
    marks = work / f"marks-{time.monotonic_ns()}.json"
    os.environ.update(env, FAKE_VLLM_MARKS=str(marks))
    spec = LaunchSpec(model="/models/tiny", port=find_free_port("127.0.0.1", 19500))
    sup = Supervisor(fake_runtime(), spec, data_dir=work, check_flags=False)
    sup.start()
    sup.wait_for((READY,), 30)
    return sup, marks


def ready_latency(runs: int, work: Path) -> tuple[list[float], list[float]]:
    from_listen, from_first_200 = [], []
    for _ in range(runs):
        sup, marks = run_fake({"FAKE_VLLM_MODE": "ready", "FAKE_VLLM_LINE_DELAY_S": "0.002"}, work)
        assert sup.state == READY, sup.lines()[-5:]
        ready = state_event(sup, READY).at_s
        m = json.loads(Path(marks).read_text())
        from_listen.append(ready - m["listening_at"])
        from_first_200.append(ready - m["first_health_200_at"])
        sup.stop()
    return from_listen, from_first_200


def failure_latency(runs: int, work: Path, *, linger: bool) -> list[float]:
    out = []
    env = {
        "FAKE_VLLM_MODE": "fail",
        "FAKE_VLLM_LOG": str(DATA / "fail_b1_kvbytes_tiny.log"),
        "FAKE_VLLM_FAIL_RE": "estimated maximum model length",
        "FAKE_VLLM_LINE_DELAY_S": "0.002",
        "FAKE_VLLM_LINGER_S": "60" if linger else "0",
        "FAKE_VLLM_IGNORE_TERM": "1" if linger else "0",
    }
    for _ in range(runs):
        sup, marks = run_fake(env, work)
        assert sup.state == FAILED
        failed = state_event(sup, FAILED).at_s
        out.append(failed - json.loads(Path(marks).read_text())["fail_line_at"])
        sup.wait_stopped(30)
    return out


def idle_cpu(seconds: float) -> float:
    """Percent of one core used by this process (the supervisor's threads) over ``seconds``."""
    me = psutil.Process()
    t0 = me.cpu_times()
    w0 = time.monotonic()
    time.sleep(seconds)
    t1 = me.cpu_times()
    busy = (t1.user - t0.user) + (t1.system - t0.system)
    return 100.0 * busy / (time.monotonic() - w0)


def fmt(values: list[float]) -> str:
    vs = sorted(values)
    p95 = vs[min(len(vs) - 1, round(0.95 * (len(vs) - 1)))]
    return (
        f"median {statistics.median(vs) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms, "
        f"max {vs[-1] * 1000:6.1f} ms (n={len(vs)})"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--real", help="a vllm executable: also measure idle CPU next to it")
    parser.add_argument("--model", help="model folder for --real")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        listen, first = ready_latency(args.runs, work)
        print(f"ready latency from listening      : {fmt(listen)}   goal <= 300 ms")
        print(f"ready latency from first /health 200: {fmt(first)}   goal <= 300 ms")
        quick = failure_latency(args.runs, work, linger=False)
        print(f"failure latency (vLLM exits)      : {fmt(quick)}   goal <= 500 ms")
        slow = failure_latency(args.runs, work, linger=True)
        print(f"failure latency (process lingers) : {fmt(slow)}   goal <= 500 ms")
        sup, _ = run_fake({"FAKE_VLLM_MODE": "ready"}, work)
        sup.wait_capacity(10)
        cpu = idle_cpu(args.idle_s)
        sup.stop()
        print(f"supervisor CPU idle (stand-in)    : {cpu:.2f} % of one core   goal < 0.5 %")
        if args.real and args.model:
            runtime = discover(args.real)
            for sub in ("tmp", "cache", "config"):
                (work / sub).mkdir(exist_ok=True)
            spec = LaunchSpec(
                model=args.model,
                port=find_free_port("127.0.0.1", 19600),
                max_model_len=1024,
                max_num_seqs=4,
                kv_cache_memory_bytes=64 << 20,
                enforce_eager=True,
                dtype="float32",
                hf_offline=True,
                extra_env={
                    "TMPDIR": str(work / "tmp"),
                    "VLLM_CACHE_ROOT": str(work / "cache"),
                    "VLLM_CONFIG_ROOT": str(work / "config"),
                },
            )
            real = Supervisor(runtime, spec, data_dir=work)
            t0 = time.monotonic()
            real.start()
            if real.wait_ready(300):
                real.wait_capacity(10)
                print(f"real vLLM start to ready          : {time.monotonic() - t0:.1f} s")
                cpu = idle_cpu(args.idle_s)
                print(f"supervisor CPU idle (real vLLM)   : {cpu:.2f} % of one core   goal < 0.5 %")
            else:
                print(f"real vLLM did not start: {real.failure}")
            report = real.stop()
            print(
                f"real vLLM stop                    : {report.elapsed_s:.2f} s, "
                f"clean={report.clean}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
