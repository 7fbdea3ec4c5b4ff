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
