"""Server faults against the stand-in vllm (tests/fakes/fake_vllm.py): a real child process tree
that serves /health like vLLM, so kills, stops and floods are real; only the engine is absent.

Each test prints its time to detect; docs/reliability.md tabulates them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from ports import free_port

from kvpilot.core.base import failures
from kvpilot.core.hardware.proctree import alive as _alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.orphans import pidfile_path
from kvpilot.core.vllm.supervisor import FAILED, READY, STARTING, Supervisor

TESTS = Path(__file__).resolve().parents[1]
FAKE = TESTS / "fakes" / "fake_vllm.py"


@pytest.fixture
def run_fake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Supervisor]]:
    started: list[Supervisor] = []
    runtime = VllmRuntime((sys.executable, str(FAKE)), "0.32.0", "env", str(FAKE))

    def start(
        env: dict[str, str] | None = None, *, port: int | None = None, **options: object
    ) -> Supervisor:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        port = port if port is not None else free_port(19800)
        spec = LaunchSpec(model="/models/tiny", port=port)
        sup = Supervisor(
            runtime,
            spec,
            data_dir=tmp_path / "data",
            check_flags=False,
            settle_s=0.1,
            **options,  # type: ignore[arg-type]
        )
        sup.start()
        started.append(sup)
        return sup

    yield start
    for sup in started:
        sup.stop(sigint_wait_s=1.0, sigterm_wait_s=1.0)


def _nothing_left(sup: Supervisor, tree: set[int]) -> None:
    assert sup.wait_stopped(30)
    assert sup.stop_report is not None and sup.stop_report.clean, sup.stop_report
    deadline = time.monotonic() + 10
    while _alive(tree) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(tree)
    assert not pidfile_path(sup.data_dir, sup.port).exists()
    assert sup.log_path is not None and sup.log_path.stat().st_size > 0  # the log is kept


def test_api_server_stopped_with_sigstop_is_hung_within_the_limit(run_fake) -> None:
    sup = run_fake({"FAKE_VLLM_CHILD": "1"}, hung_after_s=3.0, ready_health_interval_s=0.25)
    assert sup.wait_ready(20)
    tree = sup.tree_pids()
    assert len(tree) == 2
    t0 = time.monotonic()
    os.kill(sup.pid, signal.SIGSTOP)
    assert sup.wait_for((FAILED,), 15) == FAILED
    detect_s = time.monotonic() - t0
    print(f"SIGSTOP -> failed {sup.failure.kind} after {detect_s:.1f} s")
    assert sup.failure.kind == failures.SERVER_HUNG
    assert "has not answered /health" in sup.failure.message
    assert 3.0 <= detect_s < 3.0 + 2 * 2.0 + 1.0  # the limit + up to two probe timeouts (2 s)
    _nothing_left(sup, tree)


@pytest.mark.parametrize("when", ["loading", "serving"])
def test_api_server_sigkilled_fails_and_leaves_nothing(run_fake, when: str) -> None:
    env = {"FAKE_VLLM_CHILD": "1"}
    if when == "loading":
        env["FAKE_VLLM_LINE_DELAY_S"] = "0.05"  # the replayed start-up takes a few seconds
    sup = run_fake(env)
    if when == "serving":
        assert sup.wait_ready(20)
    else:
        deadline = time.monotonic() + 10
        while len(sup.tree_pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sup.state == STARTING
    tree = sup.tree_pids()
    assert len(tree) == 2
    t0 = time.monotonic()
    os.kill(sup.pid, signal.SIGKILL)
    assert sup.wait_for((FAILED,), 15) == FAILED
    detect_s = time.monotonic() - t0
    print(f"SIGKILL while {when} -> failed {sup.failure.kind} after {detect_s:.2f} s")
    assert detect_s < 3.0
    assert "SIGKILL" in sup.failure.message or "killed" in sup.failure.message.lower(), sup.failure
    _nothing_left(sup, tree)  # the orphaned child (EngineCore's stand-in) was stopped too


def test_log_flood_and_a_10_mb_line_keep_memory_bounded_and_rotate_the_log(run_fake) -> None:
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    lines, rate = 1_000_000, 100_000  # 10 s at 100,000 lines/s
    marks = Path(os.environ.get("TMPDIR", "/tmp")) / f"flood-marks-{os.getpid()}.json"
    sup = run_fake(
        {
            "FAKE_VLLM_FLOOD": f"{lines},{rate}",
            "FAKE_VLLM_HUGE_LINE": str(10 << 20),
            "FAKE_VLLM_MARKS": str(marks),
            "FAKE_VLLM_LINE_DELAY_S": "0",
        },
        log_max_bytes=8 << 20,
    )
    assert sup.wait_ready(20)
    t0 = time.monotonic()
    peak = rss_before
    deadline = t0 + 120
    while time.monotonic() < deadline:
        peak = max(peak, proc.memory_info().rss)
        if any("after the huge line" in line for line in sup.lines()[-3:]):
            break
        time.sleep(0.1)
    else:
        pytest.fail("the flood was not read within 120 s")
    elapsed = time.monotonic() - t0
    growth_mb = (peak - rss_before) / 2**20
    print(
        f"log flood: {lines:,} lines at {rate:,}/s + one 10 MB line read in {elapsed:.1f} s; "
        f"peak RSS growth {growth_mb:.0f} MB"
    )
    assert sup.state == READY  # a flood is not a failure
    buffered = sup.lines()
    assert len(buffered) == 5000  # the in-memory buffer stays at its bound
    huge = next(line for line in buffered if " INFO huge " in line)
    assert len(huge) < 70_000 and "more bytes of this line not shown" in huge
    assert len(sup.events()) < 1000
    assert growth_mb < 150
    logs = sorted(sup.log_path.parent.glob(sup.log_path.name + "*"))
    assert len(logs) == 3  # the file and its two rotated backups
    assert all(p.stat().st_size <= (8 << 20) + 70_000 for p in logs)
    marks.unlink(missing_ok=True)



def test_port_taken_between_the_check_and_the_launch_is_port_in_use(run_fake) -> None:
    import socket

    from kvpilot.core.vllm.command import port_is_free

    port = free_port(19850)
    assert port_is_free("127.0.0.1", port)  # the check passes ...
    with socket.socket() as thief:
        # ... then another program takes the port (SO_REUSEADDR as a server binds: a socket of
        # an earlier test in TIME_WAIT on this port must not make the bind itself fail)
        thief.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        thief.bind(("127.0.0.1", port))
        thief.listen(1)
        t0 = time.monotonic()
        sup = run_fake({"FAKE_VLLM_LINE_DELAY_S": "0"}, port=port)
        assert sup.wait_for((FAILED,), 20) == FAILED
        detect_s = time.monotonic() - t0
    print(f"port taken after the check -> {sup.failure.kind} after {detect_s:.1f} s")
    assert sup.failure.kind == failures.PORT_IN_USE
    # (the port named is the replayed log's own; real vLLM logs the one it was given)
    assert "already in use" in sup.failure.message and "another port" in sup.failure.message
    _nothing_left(sup, set())
