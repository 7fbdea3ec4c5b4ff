"""vLLM (the real CPU server) killed with SIGKILL while a load test runs against it: the core
load test (in this process) and ``kvpilot bench`` (a child process) running at the same time
both stop with one sentence saying the server went away, keep the requests that finished, and
leave no thread or process behind; the supervisor cleans up the server's tree.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kvpilot.core.base import failures
from kvpilot.core.hardware.proctree import alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.client import LoadTestConfig, LoadTestProgress, LoadTestReport, run_load_test
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.orphans import pidfile_path
from kvpilot.core.vllm.supervisor import FAILED, Supervisor

pytestmark = pytest.mark.e2e
READY_S = 240.0


def test_vllm_sigkilled_during_a_load_test_stops_it_with_partial_results(
    vllm_runtime: VllmRuntime, launch_spec: Callable[..., LaunchSpec], tmp_path: Path
) -> None:
    sup = Supervisor(vllm_runtime, launch_spec(), data_dir=tmp_path)
    sup.start()
    tree: set[int] = set()
    cli: subprocess.Popen[str] | None = None
    try:
        assert sup.wait_ready(READY_S), sup.lines()[-20:]
        tree = sup.tree_pids()
        threads_before = set(threading.enumerate())
        cli = subprocess.Popen(
            [sys.executable, "-m", "kvpilot.core.cli", "bench", "--url", sup.base_url,
             "--concurrency", "1,2", "--requests", "400", "--prompt-tokens", "16",
             "--output-tokens", "16", "--duration", "300"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        progress: list[LoadTestProgress] = []
        outcome: list[LoadTestReport | Exception] = []

        def load() -> None:
            cfg = LoadTestConfig(
                base_url=sup.base_url, concurrency_levels=(2, 4), prompt_tokens=16,
                output_tokens=16, requests_per_level=400, duration_s=300.0,
                warmup_requests=0,
            )
            try:
                outcome.append(run_load_test(cfg, on_progress=progress.append))
            except Exception as exc:  # noqa: BLE001 - reported by the assertions below
                outcome.append(exc)

        cli_err: list[str] = []

        def read_cli_progress() -> None:  # "\rconcurrency 1 (1/2): 3/400 done, ..." on stderr
            assert cli is not None and cli.stderr is not None
            while chunk := cli.stderr.read(1):
                cli_err.append(chunk)

        reader = threading.Thread(target=read_cli_progress, name="fault-cli-stderr")
        reader.start()
        loader = threading.Thread(target=load, name="fault-load")
        loader.start()

        def cli_done() -> int:
            counts = re.findall(r"(\d+)/400 done", "".join(cli_err))
            return int(counts[-1]) if counts else 0

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            any(p.completed >= 4 for p in progress) and cli_done() >= 2
        ):
            time.sleep(0.1)
        assert any(p.completed >= 4 for p in progress), "the load test never got going"
        assert cli_done() >= 2, "".join(cli_err)[-500:]

        t0 = time.monotonic()
        os.kill(sup.pid, signal.SIGKILL)
        loader.join(60)
        stopped_s = time.monotonic() - t0
        assert not loader.is_alive(), "the load test did not end"
        assert cli.stdout is not None
        out = cli.stdout.read()
        cli.wait(60)
        reader.join(10)
        err = "".join(cli_err)
        cli_s = time.monotonic() - t0

        (report,) = outcome
        assert isinstance(report, LoadTestReport), report
        print(f"load test stopped {stopped_s:.2f} s after SIGKILL: {report.server_lost}")
        print(f"kvpilot bench exited {cli.returncode} within {cli_s:.2f} s; stderr tail: "
              f"{err.strip().splitlines()[-1]}")
        assert report.server_lost is not None
        assert "stopped accepting connections" in report.server_lost
        assert report.levels[0].concurrency == 2 and report.levels[0].requests_ok >= 4
        assert report.levels[-1].requests_sent < 400  # it stopped, it did not plough on
        assert stopped_s < 10.0
        assert cli.returncode == 1
        assert "stopped accepting connections" in err.splitlines()[-1]
        assert "stopped: the server at" in out  # the partial table is printed ...
        table = [line.split() for line in out.splitlines() if line.strip().startswith("1 ")]
        assert table and int(table[0][1]) >= 1  # ... with the requests that finished
        leftover = [
            t for t in set(threading.enumerate()) - threads_before - {reader} if t.is_alive()
        ]
        assert leftover == [], leftover

        assert sup.wait_for((FAILED,), 30) == FAILED
        assert sup.failure is not None and sup.failure.kind == failures.ENGINE_DIED, sup.failure
        assert "SIGKILL" in sup.failure.message
        assert sup.wait_stopped(60)
        end = time.monotonic() + 20
        while alive(tree) and time.monotonic() < end:
            time.sleep(0.1)
        assert alive(tree) == set()
        assert not pidfile_path(sup.data_dir, sup.port).exists()
    finally:
        if cli is not None:
            if cli.poll() is None:
                cli.kill()
                cli.wait(10)
            for pipe in (cli.stdout, cli.stderr):
                if pipe is not None:
                    pipe.close()
        for pid in alive(tree):
            os.kill(pid, signal.SIGKILL)
        sup.stop(sigint_wait_s=1, sigterm_wait_s=1)
