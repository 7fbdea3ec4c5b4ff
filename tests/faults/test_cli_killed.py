"""``kvpilot serve`` killed with SIGKILL while its server runs: the server is left behind (it
lives in its own session), and the next ``kvpilot serve`` finds it, says so, and never starts a
second server on its port, even while the orphan is still loading and not yet listening.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from e2e.servekit import kvpilot_argv
from ports import free_port

from kvpilot.core.vllm.orphans import find_orphans, pidfile_path, read_pidfile

TESTS = Path(__file__).resolve().parents[1]
FAKE = TESTS / "fakes" / "fake_vllm.py"
MODEL = TESTS / "data" / "models" / "qwen3-8b"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    e = dict(os.environ)
    e.update(
        KVPILOT_DATA_DIR=str(tmp_path / "data"),
        KVPILOT_CACHE_DIR=str(tmp_path / "cache"),
        KVPILOT_CONFIG_DIR=str(tmp_path / "config"),
        KVPILOT_VLLM=str(exe),
        KVPILOT_FAKE_NVML="no-driver",
        HF_HUB_OFFLINE="1",
        FAKE_VLLM_CHILD="1",
        FAKE_VLLM_VERSION="0.32.0+cpu",
        FAKE_VLLM_LINE_DELAY_S="0.2",  # a slow start-up: the orphan is found while loading
    )
    return e


def _serve(env: dict[str, str], port: int, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        kvpilot_argv("serve", "--model", str(MODEL), "--port", str(port),
                     "--kv-cache-memory-bytes", "1G", *extra),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def _fake_servers() -> set[int]:
    out = set()
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(str(FAKE) == c for c in cmd) and "serve" in cmd:
            out.add(p.pid)
    return out


def test_a_killed_cli_leaves_an_orphan_the_next_serve_finds_and_never_doubles(
    env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port(19900)
    data = tmp_path / "data"
    before = _fake_servers()
    first = _serve(env, port)
    try:
        deadline = time.monotonic() + 30
        while not pidfile_path(data, port).exists() and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        record = read_pidfile(pidfile_path(data, port))
        assert record is not None
        os.kill(first.pid, signal.SIGKILL)  # kvpilot dies; vLLM (own session) does not
        first.wait(10)
        first.stdout.close()
        first.stderr.close()
        t0 = time.monotonic()
        orphans = find_orphans(data)
        detect_s = time.monotonic() - t0
        assert [o.record.pid for o in orphans] == [record.pid]
        assert psutil.pid_exists(record.pid)
        # the next serve on that port refuses, naming the orphan and the fix; starts nothing
        second = _serve(env, port)
        out, err = second.communicate(timeout=60)
        print(f"orphan found in {detect_s * 1000:.0f} ms; second serve: {err.strip()}")
        assert second.returncode == 2, (out, err)
        assert f"pid {record.pid}" in err and "--stop-orphans" in err
        assert "Traceback" not in err
        assert _fake_servers() - before == {record.pid}
        # --stop-orphans: the orphan's whole tree goes, then one new server starts
        third = _serve(env, port, "--stop-orphans")
        try:
            deadline = time.monotonic() + 60
            new = set()
            while time.monotonic() < deadline:
                new = _fake_servers() - before - {record.pid}
                if new and not psutil.pid_exists(record.pid):
                    break
                time.sleep(0.1)
            assert not psutil.pid_exists(record.pid) or psutil.Process(record.pid).status() == (
                psutil.STATUS_ZOMBIE
            )
            assert len(new) == 1
        finally:
            third.send_signal(signal.SIGINT)
            third.communicate(timeout=60)
    finally:
        for pid in _fake_servers() - before:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert _fake_servers() - before == set()
