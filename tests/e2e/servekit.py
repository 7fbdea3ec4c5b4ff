"""``kvpilot serve`` as the end-to-end tests run it: one command line, one environment, one wait.

A test names only what it changes: ``serve_argv(runtime, model, data_dir, "--auto-fallback")``
gives the tiny model's serving flags (1,024 tokens, 4 sequences, a 64 MB KV cache, eager, float32
on the CPU engine) unless ``tiny=False``; ``start_serve`` runs it with ``--json-events`` and
``wait_event`` reads its events until one arrives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ports import free_port

from .conftest import scratch_env

#: serving flags that let the tiny test model start in seconds on two CPU cores
TINY_SERVING_FLAGS = (
    "--max-model-len", "1024",
    "--max-num-seqs", "4",
    "--kv-cache-memory-bytes", "64M",
    "--enforce-eager",
    "--dtype", "float32",
)


def kvpilot_argv(*args: str) -> list[str]:
    """``kvpilot <args>`` run by this interpreter (the app under test, not an installed one)."""
    return [sys.executable, "-m", "kvpilot.core.cli", *args]


def serve_argv(
    vllm: str, model: str | Path, data_dir: Path, *extra: str, tiny: bool = True
) -> list[str]:
    """``kvpilot serve`` of ``model`` with the runtime at ``vllm`` and kvpilot's files in
    ``data_dir``, on a free port of this test process's block (not the default 8000, which a
    server of the other stream may hold); ``extra`` flags come after the tiny model's (a later
    flag wins, ``--port`` too)."""
    flags = TINY_SERVING_FLAGS if tiny else ()
    return kvpilot_argv(
        "serve", "--model", str(model), "--vllm", vllm, "--data-dir", str(data_dir),
        "--port", str(free_port(18400)), *flags, *extra,
    )


def serve_env(vllm_scratch: Path, data_dir: Path) -> dict[str, str]:
    """This environment with vLLM's temporary, cache and config folders in ``vllm_scratch``
    (:func:`~e2e.conftest.scratch_env`) and kvpilot's files in ``data_dir``."""
    return {**os.environ, **scratch_env(vllm_scratch), "KVPILOT_DATA_DIR": str(data_dir)}


def start_serve(
    argv: list[str], env: dict[str, str], *, keep_stderr: bool = False
) -> subprocess.Popen[str]:
    """Start ``argv`` (a ``serve_argv``) with ``--json-events``; stdout is the event stream."""
    return subprocess.Popen(
        [*argv, "--json-events"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if keep_stderr else subprocess.DEVNULL,
        text=True,
        env=env,
    )


def read_events(
    proc: subprocess.Popen[str], until: Callable[[dict[str, Any]], bool], timeout_s: float
) -> list[dict[str, Any]]:
    """JSON events from ``kvpilot serve --json-events`` until one satisfies ``until``.

    Raises:
        AssertionError: the stream ended or ``timeout_s`` passed first (with the last events).
    """
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        ev = json.loads(line)
        events.append(ev)
        if until(ev):
            return events
    raise AssertionError(f"condition not reached; events: {events[-15:]}")


def wait_event(proc: subprocess.Popen[str], name: str, timeout_s: float) -> list[dict[str, Any]]:
    """The events up to and including the first ``name`` event (e.g. ``"ready"``)."""
    return read_events(proc, lambda e: e["event"] == name, timeout_s)


def kill_cli(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the kvpilot process (vLLM lives on in its own session) and close its pipes."""
    proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()  # (no ResourceWarning: warnings fail the run)
