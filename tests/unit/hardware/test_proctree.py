"""The one process-tree kill: a helper in its own session and what it started all go."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from kvpilot.core.hardware import proctree

_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_kill_tree_stops_the_helper_and_its_children() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    with proc.stdout:
        child = int(proc.stdout.readline())
    try:
        t0 = time.monotonic()
        killed = proctree.kill_tree(proc.pid, timeout_s=5.0)
        assert time.monotonic() - t0 < 10
        assert proc.pid in killed
        assert child in killed
        proc.wait(5)
        assert _gone(child)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_kill_tree_of_a_gone_pid_is_empty() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(10)
    assert proctree.kill_tree(proc.pid) == []


def test_a_group_whose_number_another_leader_took_is_not_signalled() -> None:
    # our server's group has ended and a later session leader (another program) got its number:
    # the stop that comes late sends that program nothing
    other = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        ours_started = psutil.Process(other.pid).create_time() - 30.0
        times = {other.pid: ours_started}
        assert proctree.group_reused(other.pid, times)
        report = proctree.stop_tree(
            other.pid, other.pid, create_times=times, leader_exited=lambda: True,
            sigint_wait_s=0.2, sigterm_wait_s=0.2, sigkill_wait_s=0.2,
        )
        assert report.signals == ()
        assert other.poll() is None and not _gone(other.pid)
        # with the leader's own start time the same group is ours, and it is stopped
        mine = {other.pid: psutil.Process(other.pid).create_time()}
        assert not proctree.group_reused(other.pid, mine)
        assert proctree.stop_tree(
            other.pid, other.pid, create_times=mine, leader_exited=lambda: other.poll() is not None,
            sigint_wait_s=0.2, sigterm_wait_s=2.0,
        ).clean
    finally:
        if other.poll() is None:
            other.kill()
        other.wait(5)
