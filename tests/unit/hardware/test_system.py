"""Host facts: WSL2 detection, CPU model, free disk where models go."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from kvpilot.core.hardware.system import (
    cpu_model_from_cpuinfo,
    detect_wsl,
    free_bytes_at,
    read_system,
)

WSL2_VERSION = (
    "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@f9c826d3017f) (gcc (GCC) 11.2.0, "
    "GNU ld (GNU Binutils) 2.37) #1 SMP Tue Nov 5 00:21:55 UTC 2024"
)
NATIVE_VERSION = "Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP"


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        (WSL2_VERSION, {}, True),
        (NATIVE_VERSION, {}, False),
        (NATIVE_VERSION, {"WSL_DISTRO_NAME": "Ubuntu"}, True),
        (None, {}, False),
        (None, {"WSL_DISTRO_NAME": ""}, False),
    ],
)
def test_detect_wsl(text: str | None, env: dict[str, str], expected: bool) -> None:
    assert detect_wsl(text, env) is expected


def test_cpu_model_from_cpuinfo() -> None:
    x86 = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\n"
        "model name\t: AMD Ryzen 9 7950X 16-Core Processor\n"
    )
    assert cpu_model_from_cpuinfo(x86) == "AMD Ryzen 9 7950X 16-Core Processor"
    arm = "processor\t: 0\nBogoMIPS\t: 108.00\n\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n"
    assert cpu_model_from_cpuinfo(arm) == "Raspberry Pi 5 Model B Rev 1.0"
    assert cpu_model_from_cpuinfo("") is None
    assert cpu_model_from_cpuinfo(None) is None


def test_free_bytes_at_missing_dir_measures_nearest_parent(tmp_path: Path) -> None:
    missing = tmp_path / "not" / "yet" / "created"
    measured = free_bytes_at(missing)
    assert measured is not None
    assert measured == pytest.approx(psutil.disk_usage(str(tmp_path)).free, rel=0.01)
    assert free_bytes_at(None) is None


def test_read_system_with_recorded_proc_files(tmp_path: Path) -> None:
    (tmp_path / "version").write_text(WSL2_VERSION)
    (tmp_path / "cpuinfo").write_text("model name\t: Intel(R) Core(TM) i9-14900K\n")
    models = tmp_path / "models"
    snap = read_system(models, hf_cache_dir=tmp_path / "hf", proc_root=tmp_path, environ={})
    assert snap.is_wsl2 is True
    assert snap.cpu_model == "Intel(R) Core(TM) i9-14900K"
    assert snap.hf_cache_dir == str(tmp_path / "hf")
    assert snap.model_dir == str(models)
    assert snap.hf_cache_free_bytes and snap.model_dir_free_bytes
    vm = psutil.virtual_memory()
    assert snap.ram_total_bytes == vm.total
    assert 0 < snap.ram_available_bytes <= snap.ram_total_bytes
    assert snap.swap_free_bytes <= snap.swap_total_bytes
    assert snap.cpu_cores_logical and snap.cpu_cores_logical >= 1


def test_read_system_on_this_host_is_not_wsl(tmp_path: Path) -> None:
    (tmp_path / "version").write_text(NATIVE_VERSION)
    snap = read_system(proc_root=tmp_path, environ={})
    assert snap.is_wsl2 is False
    assert snap.model_dir is None and snap.model_dir_free_bytes is None


def test_hf_cache_dir_is_read_when_the_system_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "version").write_text(NATIVE_VERSION)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    snap = read_system(proc_root=tmp_path, environ={})
    assert snap.hf_cache_dir == str(tmp_path / "hf" / "hub")
    free = psutil.disk_usage(str(tmp_path)).free  # other writers move it a little
    assert snap.hf_cache_free_bytes is not None
    assert abs(snap.hf_cache_free_bytes - free) < 256 * 2**20
