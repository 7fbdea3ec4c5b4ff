"""The model folder removed, or made unreadable, while the real vLLM CPU server loads it (a copy
of the tiny test model in a temporary folder; one server start each, ~30-60 s on two cores).

The moment: vLLM's EngineCore logs its first line (the API server has read the model's config
and started the engine, whose worker has not loaded the weights yet: that takes it some
seconds more). The user must be told in one sentence
that the model folder went away or cannot be read and what to do; no process, port or pidfile is
left; the launch log is kept.

"Unreadable" is ``chmod 000`` on the folder. As root that alone stops nothing (root passes every
permission check), so there the server is started without the two capabilities that let root
read what its permissions forbid (``setpriv --bounding-set -dac_override,-dac_read_search``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.base import failures
from kvpilot.core.hardware.proctree import alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.orphans import pidfile_path
from kvpilot.core.vllm.supervisor import FAILED, READY, STARTING, Supervisor

pytestmark = pytest.mark.e2e
READY_S = 240.0


@pytest.fixture
def model_copy(tiny_model: Path, tmp_path: Path) -> Iterator[Path]:
    target = tmp_path / "models" / "tiny copy"  # a space, as users' folders have
    shutil.copytree(tiny_model, target)
    yield target
    if target.exists():
        target.chmod(0o755)


def _without_root_read_override(runtime: VllmRuntime) -> VllmRuntime:
    if os.geteuid() != 0:
        return runtime
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: a chmod 000 folder stays readable")
    prefix = (setpriv, "--bounding-set", "-dac_override,-dac_read_search")
    return replace(runtime, argv_prefix=prefix + runtime.argv_prefix)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _fault_while_loading(
    runtime: VllmRuntime, spec: LaunchSpec, data_dir: Path, fault: Callable[[], None]
) -> tuple[Supervisor, float]:
    """Start the server, apply ``fault`` once the EngineCore exists, wait for the failure and
    the clean-up; returns the supervisor and the seconds from the fault to FAILED."""
    sup = Supervisor(runtime, spec, data_dir=data_dir)
    sup.start()
    tree: set[int] = set()
    try:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and sup.state == STARTING:
            if any("Initializing a V1 LLM engine" in line for line in sup.lines()[-50:]):
                break
            time.sleep(0.05)
        tree = sup.tree_pids()
        assert sup.state == STARTING and len(tree) >= 2, (sup.state, sup.lines()[-10:])
        t0 = time.monotonic()
        fault()
        state = sup.wait_for((FAILED, READY), READY_S)
        detect_s = time.monotonic() - t0
        assert state == FAILED, ("the server came up without its model folder", sup.lines()[-20:])
        assert sup.wait_stopped(60)
        tree |= sup.tree_pids()
        end = time.monotonic() + 20
        while alive(tree) and time.monotonic() < end:
            time.sleep(0.1)
        assert alive(tree) == set(), "a process of the server tree was left"
        assert not pidfile_path(sup.data_dir, sup.port).exists()
        assert _port_free(sup.port)
        assert sup.log_path is not None and sup.log_path.stat().st_size > 0
        return sup, detect_s
    finally:
        for pid in alive(tree):
            os.kill(pid, signal.SIGKILL)
        sup.stop(sigint_wait_s=1, sigterm_wait_s=1)


@pytest.mark.parametrize(
    ("fault", "told"),
    [
        ("removed", "was removed (or moved) while vLLM was loading it"),
        ("made unreadable", "was emptied or made unreadable after vLLM had started"),
    ],
)
def test_model_folder_fault_while_loading(
    vllm_runtime: VllmRuntime,
    launch_spec: Callable[..., LaunchSpec],
    model_copy: Path,
    tmp_path: Path,
    fault: str,
    told: str,
) -> None:
    if fault == "removed":
        runtime, act = vllm_runtime, lambda: shutil.rmtree(model_copy)
    else:
        runtime, act = _without_root_read_override(vllm_runtime), lambda: model_copy.chmod(0)
    spec = launch_spec(model=str(model_copy))
    sup, detect_s = _fault_while_loading(runtime, spec, tmp_path / "data", act)
    failure = sup.failure
    assert failure is not None
    print(f"model folder {fault} while loading -> {failure.kind} after {detect_s:.1f} s: "
          f"{failure.message}")
    assert failure.kind == failures.MODEL_NOT_FOUND
    assert f"model folder '{model_copy}'" in failure.message and told in failure.message
