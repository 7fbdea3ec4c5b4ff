"""A server an earlier kvpilot left running (an orphan), made for real: a kvpilot-like process
starts the stand-in vLLM (tests/fakes/fake_vllm.py) in a session of its own, writes its pidfile
as the supervisor does, and exits without stopping it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testpaths import TESTS

FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"

ORPHAN_MAKER = r"""
import os, subprocess, sys, time
from pathlib import Path
import httpx, psutil
from kvpilot.core.vllm.orphans import ServerRecord, write_pidfile
fake, data_dir, port = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
data_dir.mkdir(parents=True, exist_ok=True)
log = data_dir / "orphan.log"
argv = [sys.executable, fake, "serve", "/models/tiny", "--host", "127.0.0.1", "--port", str(port)]
proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT,
                        start_new_session=True)
deadline = time.monotonic() + 30
while True:
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
            break
    except httpx.HTTPError:
        pass
    assert time.monotonic() < deadline, log.read_text()[-2000:]
    time.sleep(0.1)
me = psutil.Process()
write_pidfile(data_dir, ServerRecord(
    pid=proc.pid, pgid=proc.pid, port=port, host="127.0.0.1", model="/models/tiny",
    served_model_name="/models/tiny", started_at=time.time(), log_path=str(log),
    argv=tuple(argv), create_time=psutil.Process(proc.pid).create_time(),
    owner_pid=me.pid, owner_create_time=me.create_time(), vllm_version="0.32.0"))
tree = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
print(sorted(tree), flush=True)
os._exit(0)  # this kvpilot "crashes": the server lives on in its own session
"""


def make_orphan(data_dir: Path, port: int) -> set[int]:
    """Start the stand-in server from a kvpilot process that then exits: the pids it leaves."""
    proc = subprocess.run(
        [sys.executable, "-c", ORPHAN_MAKER, str(FAKE_VLLM), str(data_dir), str(port)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))
