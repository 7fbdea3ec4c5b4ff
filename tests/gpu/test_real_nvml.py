"""The hardware layer against the real NVML library on a machine with an NVIDIA GPU.

Skipped where no NVIDIA driver or GPU is present. Run with ``-s`` to see what was read.
"""

from __future__ import annotations

import importlib.util
import time

import pytest

from kvpilot.core.cli import main
from kvpilot.core.fit.budget_now import launch_budget, passes_startup_check
from kvpilot.core.hardware.nvml import import_pynvml
from kvpilot.core.hardware.probe import ProbeResult, memory_now, probe
from kvpilot.core.hardware.problems import ProblemKind
from kvpilot.core.hardware.sampler import GpuSampler
from kvpilot.core.hardware.specs import lookup

pytestmark = pytest.mark.gpu

MiB = 1024**2
ABSENT = {ProblemKind.LIBRARY_NOT_FOUND, ProblemKind.DRIVER_NOT_LOADED, ProblemKind.NO_DEVICES}


@pytest.fixture(scope="module")
def real() -> ProbeResult:
    result = probe(import_pynvml())
    if result.error is not None and result.error.kind in ABSENT:
        pytest.skip(f"no NVIDIA GPU here: {result.error.message}")
    return result


def test_probe_reads_every_gpu(real: ProbeResult) -> None:
    assert real.ok, real.error
    print(
        f"\ndriver {real.driver_version}, CUDA {real.cuda_driver_version}, NVML {real.nvml_version}"
    )
    assert real.driver_version and real.cuda_driver_version and real.nvml_version
    for gpu in real.gpus:
        print(gpu)
        assert gpu.name and gpu.uuid and gpu.uuid.startswith(("GPU-", "MIG-"))
        assert gpu.pci_device_id is not None and gpu.pci_device_id.startswith("0x")
        assert gpu.compute_capability is not None and gpu.compute_capability >= (3, 0)
        total, used, free = gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes
        assert total and used is not None and free is not None
        reserved = gpu.memory_reserved_bytes or 0
        assert abs(total - (reserved + used + free)) <= 16 * MiB
        for proc in gpu.processes:
            assert proc.pid > 0
            assert proc.used_bytes is None or proc.used_bytes >= 0
        spec = lookup(gpu.pci_device_id, gpu.name, memory_total_bytes=total)
        print("spec:", None if spec is None else (spec.short_name, spec.compute_capability))
        if spec is not None:
            assert spec.compute_capability == gpu.compute_capability
        print("unavailable:", gpu.unavailable_fields)


def test_launch_budget_passes_vllms_rule(real: ProbeResult) -> None:
    for gpu in real.gpus:
        budget = launch_budget(memory_now(gpu))
        assert budget is not None
        print(f"\nGPU {gpu.index}: {budget.message}")
        assert 0.0 <= budget.max_utilization <= 1.0
        if budget.max_utilization > 0:
            usable = budget.free_bytes - budget.margin_bytes
            assert passes_startup_check(budget.total_bytes, usable, budget.max_utilization)


def test_cuda_total_matches_nvml_minus_reserved(real: ProbeResult) -> None:
    """What vLLM multiplies by gpu_memory_utilization is CUDA's total; check our derivation."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed: cannot ask CUDA for its total")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    free, total = torch.cuda.mem_get_info(0)
    gpu = real.gpus[0]
    print(
        f"\ncudaMemGetInfo total {total} free {free}; NVML total {gpu.memory_total_bytes} "
        f"reserved {gpu.memory_reserved_bytes} -> derived {gpu.cuda_total_bytes}"
    )
    assert gpu.cuda_total_bytes is not None
    assert abs(total - gpu.cuda_total_bytes) <= 64 * MiB


def test_sampler_at_10_hz(real: ProbeResult) -> None:
    sampler = GpuSampler(rate_hz=10, nvml_module=import_pynvml())
    cpu0 = time.process_time()
    with sampler:
        time.sleep(2.0)
    cpu = time.process_time() - cpu0
    samples = sampler.history()
    print(
        f"\n{len(samples)} samples in 2 s, {cpu / 2 * 100:.3f} % of one core; last: {samples[-1]}"
    )
    assert len(samples) >= 15
    assert all(s.ok for s in samples)
    assert samples[-1].memory_total_bytes == real.gpus[0].memory_total_bytes
    assert all(s.read_s < 0.1 for s in samples)


def test_cli_gpu(real: ProbeResult, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu"]) == 0
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out)
    assert "launch now" in out
