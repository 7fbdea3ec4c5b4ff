"""The runtime table and the choice of build for the detected driver."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from kvpilot.core.base.errors import RuntimeInstallError
from kvpilot.core.hardware.recorded_nvml import load_recorded
from kvpilot.core.runtimes.releases import (
    choose_for_this_machine,
    choose_release,
    find_release,
    load_releases,
)


def test_bundled_table_is_complete_and_sourced() -> None:
    raw = json.loads((resources.files("kvpilot.resources") / "vllm_runtimes.json").read_text())
    assert set(raw["sources"]) >= {"vllm_wheels", "torch_cuda", "vllm_cpu", "drivers"}
    rels = load_releases()
    assert {(r.version, r.variant) for r in rels} >= {("0.33.0", "cuda"), ("0.32.0", "cpu")}
    for r in rels:
        assert r.peak_bytes >= r.installed_bytes > 0
        if r.variant == "cuda":
            assert r.cuda_version and r.min_driver_linux and r.package == "vllm"
        else:
            assert r.cuda_version is None and r.package == "vllm-cpu"
    cpu = find_release(rels, None, "cpu")
    assert cpu.requirement == "vllm-cpu==0.32.0" and cpu.measured
    assert cpu.runtime_id == "0.32.0-cpu" and cpu.local_version == "0.32.0+cpu"
    assert cpu.python_ok("3.11.7") and not cpu.python_ok("3.10.12")


@pytest.mark.parametrize(
    ("cuda", "expected"),
    [("13.0", "0.34.0"), ("13.1", "0.34.0"), ("12.8", "0.19.1"), ("12.9", "0.19.1")],
)
def test_newest_build_the_driver_supports(cuda: str, expected: str) -> None:
    choice = choose_release(load_releases(), has_nvidia_gpu=True, cuda_driver_version=cuda)
    assert (choice.release.version, choice.release.variant) == (expected, "cuda")
    assert f"CUDA {cuda}" in choice.reason


def test_034_is_offered_and_033_stays_installable() -> None:
    rels = load_releases()
    new = find_release(rels, "0.34.0", "cuda")
    # the 0.34.0 wheel's METADATA pins torch==2.14.0 with cu13 companions; vllm/envs.py
    # VLLM_MAIN_CUDA_VERSION is 13.0; 580.65.06 is CUDA 13.0's Linux driver floor
    assert (new.torch, new.cuda_version, new.min_driver_linux) == ("2.14.0", "13.0", "580.65.06")
    assert new.requirement == "vllm==0.34.0" and new.python_ok("3.12.3")
    old = choose_release(rels, has_nvidia_gpu=True, cuda_driver_version="13.0", version="0.33.0")
    assert old.release.runtime_id == "0.33.0-cuda"
    cuda = [r.version for r in rels if r.variant == "cuda"]
    assert cuda[0] == "0.34.0" and "0.33.0" in cuda  # newest first per variant


def test_old_driver_is_refused_naming_the_driver_needed() -> None:
    with pytest.raises(RuntimeInstallError) as err:
        choose_release(load_releases(), has_nvidia_gpu=True, cuda_driver_version="12.4")
    msg = str(err.value)
    assert "CUDA 12.4" in msg and "CUDA 12.8" in msg and "570.26" in msg
    assert "update the NVIDIA driver" in msg
    with pytest.raises(RuntimeInstallError, match=r"580\.65\.06"):
        choose_release(
            load_releases(), has_nvidia_gpu=True, cuda_driver_version="12.8", version="0.33.0"
        )


def test_cpu_build_without_a_gpu_and_cuda_refused_without_one() -> None:
    choice = choose_release(load_releases(), has_nvidia_gpu=False, cuda_driver_version=None)
    assert choice.release.runtime_id == "0.32.0-cpu"
    assert "no NVIDIA GPU" in choice.reason
    with pytest.raises(RuntimeInstallError, match="needs an NVIDIA GPU"):
        choose_release(
            load_releases(), has_nvidia_gpu=False, cuda_driver_version=None, variant="cuda"
        )
    with pytest.raises(RuntimeInstallError, match=r"known cpu builds: 0\.32\.0"):
        choose_release(
            load_releases(), has_nvidia_gpu=False, cuda_driver_version=None, version="0.1.0"
        )


def test_choice_from_recorded_machines() -> None:
    """Through NVML (the recorded snapshots): 12.8 driver -> 0.19.1; 12.4 -> refused;
    no driver -> the CPU build."""
    rtx5090 = choose_for_this_machine(nvml_module=load_recorded("rtx5090"))
    assert rtx5090.release.runtime_id == "0.19.1-cuda"
    with pytest.raises(RuntimeInstallError, match=r"570\.26"):
        choose_for_this_machine(nvml_module=load_recorded("rtx4090-desktop"))
    none = choose_for_this_machine(nvml_module=load_recorded("no-driver"))
    assert none.release.runtime_id == "0.32.0-cpu"
