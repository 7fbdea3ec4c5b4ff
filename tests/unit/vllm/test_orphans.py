"""Pidfiles, orphan detection and certain stops, with real child process trees (no vLLM)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from kvpilot.core.hardware.proctree import group_members, stop_tree
from kvpilot.core.vllm.orphans import (
    ServerRecord,
    find_orphans,
    pidfile_path,
    read_pidfile,
    stop_orphan,
    write_pidfile,
)

# a parent that ignores SIGINT/SIGTERM (like vLLM while loading) with a child that does too
STUBBORN_TREE = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen([sys.executable, '-c', "
    "'import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)'])\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)
POLITE_TREE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


_spawned: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _close_spawned() -> Iterator[None]:
    """Close the pipes and reap the processes a test spawned (no ResourceWarning, no zombie)."""
    yield
    while _spawned:
        proc = _spawned.pop()
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def spawn(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    _spawned.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def record_for(pid: int, port: int, owner_pid: int, owner_ct: float) -> ServerRecord:
    return ServerRecord(
        pid=pid,
        pgid=os.getpgid(pid),
        port=port,
        host="127.0.0.1",
        model="/models/tiny",
        served_model_name="/models/tiny",
        started_at=time.time(),
        log_path="",
        argv=("vllm", "serve", "/models/tiny"),
        create_time=psutil.Process(pid).create_time(),
        owner_pid=owner_pid,
        owner_create_time=owner_ct,
    )


@pytest.fixture
def dead_owner() -> tuple[int, float]:
    """Pid and create time of a process that has exited (a crashed kvpilot)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    ct = psutil.Process(p.pid).create_time()
    p.wait()
    return p.pid, ct


def test_stop_tree_escalates_to_sigkill_and_leaves_nothing(tmp_path: Path) -> None:
    proc = spawn(STUBBORN_TREE)
    time.sleep(0.2)
    kids = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    assert kids
    report = stop_tree(
        proc.pid,
        proc.pid,
        leader_exited=lambda: proc.poll() is not None,
        sigint_wait_s=0.3,
        sigterm_wait_s=0.3,
    )
    assert report.signals[:3] == ("SIGINT", "SIGTERM", "SIGKILL")
    assert report.clean and report.survivors == ()
    assert not any(psutil.pid_exists(k) and psutil.Process(k).status() != "zombie" for k in kids)


def test_stop_tree_kills_children_left_after_the_leader_died() -> None:
    proc = spawn(POLITE_TREE)
    time.sleep(0.2)
    kids = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    os.kill(proc.pid, signal.SIGKILL)  # like SIGKILL of vLLM's API server
    proc.wait()
    assert group_members(proc.pid) == kids  # the children live on, reparented
    report = stop_tree(proc.pid, proc.pid, known_pids=kids, leader_exited=lambda: True)
    assert report.clean
    assert group_members(proc.pid) == set()


def test_gpu_hook_is_consulted_until_our_pids_are_gone() -> None:
    proc = spawn(POLITE_TREE)
    calls: list[int] = []

    def gpu_pids() -> set[int]:
        calls.append(1)
        return {proc.pid} if proc.poll() is None else {12345678}

    report = stop_tree(
        proc.pid, proc.pid, leader_exited=lambda: proc.poll() is not None, gpu_pids_check=gpu_pids
    )
    assert report.clean and report.gpu_pids_left == () and calls


def test_pidfile_round_trip(tmp_path: Path) -> None:
    rec = record_for(os.getpid(), 8123, os.getpid(), psutil.Process().create_time())
    path = write_pidfile(tmp_path, rec)
    assert path == pidfile_path(tmp_path, 8123)
    assert read_pidfile(path) == rec


def test_find_orphans_reports_live_servers_of_a_dead_owner_and_stops_them(
    tmp_path: Path, dead_owner: tuple[int, float]
) -> None:
    proc = spawn(POLITE_TREE)
    write_pidfile(tmp_path, record_for(proc.pid, 8124, *dead_owner))
    orphans = find_orphans(tmp_path)
    assert len(orphans) == 1
    o = orphans[0]
    assert o.leader_alive and proc.pid in o.pids and len(o.pids) == 2
    report = stop_orphan(o, sigint_wait_s=2.0)
    proc.wait(timeout=5)
    assert report.clean
    assert not pidfile_path(tmp_path, 8124).exists()
    assert find_orphans(tmp_path) == []


def test_servers_of_a_live_owner_are_not_orphans(tmp_path: Path) -> None:
    proc = spawn(POLITE_TREE)
    try:
        write_pidfile(
            tmp_path, record_for(proc.pid, 8125, os.getpid(), psutil.Process().create_time())
        )
        assert find_orphans(tmp_path) == []
        assert pidfile_path(tmp_path, 8125).exists()
    finally:
        stop_tree(proc.pid, proc.pid, leader_exited=lambda: proc.poll() is not None)


def test_stale_and_reused_pidfiles_are_removed(
    tmp_path: Path, dead_owner: tuple[int, float]
) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    rec = record_for(gone.pid, 8126, *dead_owner)
    gone.wait()
    write_pidfile(tmp_path, rec)
    # a live pid whose create time does not match: a reused pid, not our server
    reused = ServerRecord(
        **{
            **rec.__dict__,
            "pid": os.getpid(),
            "pgid": 999_999_999,
            "port": 8127,
            "create_time": 1.0,
        }
    )
    write_pidfile(tmp_path, reused)
    (tmp_path / "servers" / "8128.json").write_text("garbage")
    assert find_orphans(tmp_path) == []
    assert list((tmp_path / "servers").glob("*.json")) == []


def test_a_pidfile_whose_group_number_a_later_leader_took_is_stale(
    tmp_path: Path, dead_owner: tuple[int, float]
) -> None:
    # our server (pid = pgid = N) ended long ago and another program's session leader got N:
    # its group is not ours, so it is neither reported nor stopped, and the pidfile goes
    other = spawn(POLITE_TREE)
    rec = record_for(other.pid, 8129, *dead_owner)
    stale = ServerRecord(**{**rec.__dict__, "create_time": rec.create_time - 30.0})
    write_pidfile(tmp_path, stale)
    assert find_orphans(tmp_path) == []
    assert not pidfile_path(tmp_path, 8129).exists()
    assert other.poll() is None
