"""Two GPUs: NVML topology and P2P through the replay, selection by index and UUID, combined
telemetry of exactly the GPUs in use."""

from __future__ import annotations

import argparse

import pytest
from fakes import pynvml_stub

from kvpilot.core.base.errors import HardwareError
from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.probe import probe
from kvpilot.core.hardware.sampler import GpuSampler, GpuSetSampler, combine_samples
from kvpilot.core.hardware.selection import (
    cuda_visible_devices,
    describe_gpu,
    parse_gpu_indices,
    preferred_gpu,
    select_gpus,
)
from kvpilot.core.hardware.target import DeviceTarget

UUID_4090 = "GPU-6f3a2c1e-8b4d-4e2a-9c71-0d5e3b7a9f12"
UUID_3090 = "GPU-1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b"


def test_recorded_nvml_answers_topology_and_p2p_like_pynvml(fake):
    nv = fake("rtx4090-rtx3090")
    nv.nvmlInit()
    a, b = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetTopologyCommonAncestor(a, b) == nv.NVML_TOPOLOGY_HOSTBRIDGE == 30
    assert nv.nvmlDeviceGetTopologyCommonAncestor(b, a) == 30
    status = nv.nvmlDeviceGetP2PStatus(a, b, nv.NVML_P2P_CAPS_INDEX_READ)
    assert status == nv.NVML_P2P_STATUS_GPU_NOT_SUPPORTED == 2
    # a one-GPU snapshot records no links: NVML's NOT_SUPPORTED
    one = fake("rtx4090-desktop")
    one.nvmlInit()
    h = one.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(one.NVMLError) as err:
        one.nvmlDeviceGetTopologyCommonAncestor(h, h)
    assert err.value.value == one.NVML_ERROR_NOT_SUPPORTED


def test_pynvml_has_the_constants_the_fake_uses():
    pynvml = pytest.importorskip("pynvml")
    assert pynvml.NVML_TOPOLOGY_HOSTBRIDGE == 30
    assert pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED == 2
    assert pynvml.NVML_P2P_CAPS_INDEX_NVLINK == 2
    assert callable(pynvml.nvmlDeviceGetP2PStatus)
    assert callable(pynvml.nvmlDeviceGetTopologyCommonAncestor)


def test_probe_reads_both_gpus_and_their_link(fake):
    result = probe(fake("rtx4090-rtx3090"))
    assert [g.name for g in result.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    link = result.link(1, 0)
    assert link is not None and (link.index_a, link.index_b) == (0, 1)
    assert link.topology == "PHB"
    assert link.p2p is False and link.nvlink is False
    assert link.p2p_reason == "not supported by the GPU"
    assert probe(fake("rtx4090-desktop")).links == ()


def test_p2p_query_goes_through_the_choke_point(fake):
    with nvml_mod.Nvml(fake("rtx4090-rtx3090")) as nv:
        a, b = nv.handle(0), nv.handle(1)
        assert nvml_mod.topology_level(nv, a, b) == 30
        assert nvml_mod.p2p_status(nv, a, b, "write") == 2
        with pytest.raises(KeyError):
            nvml_mod.p2p_status(nv, a, b, "teleport")


def test_selection_by_index_and_uuid(fake, snapshot):
    result = probe(fake("rtx4090-rtx3090"))
    assert parse_gpu_indices("1, 0") == (1, 0)
    with pytest.raises(HardwareError, match="distinct"):
        parse_gpu_indices("0,0")
    with pytest.raises(HardwareError, match="indices separated by commas"):
        parse_gpu_indices("a,b")
    both = select_gpus(result, (0, 1))
    assert cuda_visible_devices(both) == f"{UUID_4090},{UUID_3090}"
    with pytest.raises(HardwareError, match=r"there is no GPU 2: NVML reports 2 \(0, 1\)"):
        select_gpus(result, (2,))
    # one card is enough: the 3090 that does not drive the display
    assert preferred_gpu(result.gpus).index == 1
    # no card has the memory asked for: still the idle one
    need = result.gpus[1].memory_free_bytes + 1
    assert preferred_gpu(result.gpus, needed_bytes=need).index == 1
    # only the display card has it (something else holds the 3090): the display card
    busy = snapshot("rtx4090-rtx3090")
    busy["devices"][1]["memory"]["used"] = 20 << 30
    busy["devices"][1]["memory"]["free"] = 5 << 30
    gpus = probe(pynvml_stub.make(busy)).gpus
    assert preferred_gpu(gpus, needed_bytes=18 << 30).index == 0
    assert preferred_gpu(gpus, needed_bytes=4 << 30).index == 1
    assert describe_gpu(result.gpus[0]).startswith("0: RTX 4090, ")
    assert describe_gpu(result.gpus[0]).endswith("(display)")


def test_combined_sample_sums_memory_and_merges_processes(fake):
    nv = fake("rtx4090-rtx3090")
    s0 = GpuSampler(0, nvml_module=nv).sample_once()
    s1 = GpuSampler(1, nvml_module=nv).sample_once()
    both = combine_samples([s0, s1])
    assert both.gpu_indices == (0, 1)
    assert both.memory_total_bytes == s0.memory_total_bytes + s1.memory_total_bytes
    assert both.memory_used_bytes == s0.memory_used_bytes + s1.memory_used_bytes
    assert both.temperature_c == max(s0.temperature_c, s1.temperature_c)
    assert set(both.process_used_bytes) == set(s0.process_used_bytes) | set(s1.process_used_bytes)
    assert combine_samples([s0]) is s0


def test_set_sampler_samples_exactly_the_gpus_in_use(fake):
    nv = fake("rtx4090-rtx3090")
    got = []
    sampler = GpuSetSampler((1,) * 1 + (0,), nvml_module=nv, on_sample=got.append)
    sample = sampler.sample_once()
    sampler.close()
    assert sample.ok and sample.gpu_indices == (1, 0) and sample.gpu_index == 1
    assert got == [sample]
    only_3090 = GpuSampler(1, nvml_module=fake("rtx4090-rtx3090")).sample_once()
    assert only_3090.memory_total_bytes == 25769803776
    with pytest.raises(ValueError):
        GpuSetSampler((0, 0), nvml_module=nv)


def test_device_flags_pick_gpus_by_index_and_launch_by_uuid(monkeypatch):
    from kvpilot.core.commands import serving_args

    monkeypatch.setenv(nvml_mod.FAKE_ENV, "rtx4090-rtx3090")
    args = argparse.Namespace(gpu=None, gpu_total_mib=None, gpu_free_mib=None,
                              gpu_index=1, gpus=None)
    one = serving_args.device_from_args(args, None)
    assert one.name == "NVIDIA GeForce RTX 3090" and one.gpu_indices == (1,)
    assert one.cuda_visible_devices == UUID_3090
    args.gpu_index, args.gpus = None, "0,1"
    two = serving_args.device_from_args(args, None)
    assert two.count == 2 and two.cuda_visible_devices == f"{UUID_4090},{UUID_3090}"
    assert two.allreduce == "host"  # NVML: no P2P between the two GeForce cards
    assert two.name == "RTX 4090 + RTX 3090"  # the label the window shows too
    # the smaller card bounds each rank, by what CUDA sees: NVML's 24564 MiB (4090) and
    # 24576 MiB (3090) less their reserved 346 and 430 MiB make the 3090 the smaller one
    assert two.total_bytes == min(24564 - 346, 24576 - 430) * 2**20 == one.total_bytes
    assert two.nvml_total_bytes == one.nvml_total_bytes == 24576 * 2**20
    args.gpus = "0,2"
    with pytest.raises(HardwareError, match="there is no GPU 2"):
        serving_args.device_from_args(args, None)


def test_serve_pins_the_gpus_by_uuid_and_spans_them(monkeypatch):
    from kvpilot.core.commands import serving_args
    from kvpilot.core.commands.serve import spec_for_device
    from kvpilot.core.vllm.command import LaunchSpec, build_command

    monkeypatch.setenv(nvml_mod.FAKE_ENV, "rtx4090-rtx3090")
    args = argparse.Namespace(gpu=None, gpu_total_mib=None, gpu_free_mib=None,
                              gpu_index=None, gpus="1,0")
    device = serving_args.device_from_args(args, None)
    spec = spec_for_device(LaunchSpec(model="/models/tiny"), device)
    assert spec.tensor_parallel_size == 2
    cmd = build_command(spec)
    assert cmd.env["CUDA_VISIBLE_DEVICES"] == f"{UUID_3090},{UUID_4090}"
    assert "--tensor-parallel-size" in cmd.argv
    # an explicit tensor-parallel size is kept; no selection on a machine: nothing pinned
    explicit = spec_for_device(LaunchSpec(model="/m", tensor_parallel_size=1, max_num_seqs=2),
                               DeviceTarget("gpu", 1 << 34))
    assert explicit.cuda_visible_devices is None and explicit.tensor_parallel_size == 1


def test_gpu_command_lists_both_cards_and_their_link(capsys):
    import json

    from kvpilot.core.cli import main

    assert main(["gpu", "--fake-nvml", "rtx4090-rtx3090"]) == 0
    text = capsys.readouterr().out
    assert "GPU 1  NVIDIA GeForce RTX 3090" in text
    assert "GPU 0 <-> GPU 1: PHB, no peer-to-peer (not supported by the GPU)" in text
    assert main(["gpu", "--fake-nvml", "rtx4090-rtx3090", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [g["uuid"] for g in doc["gpus"]] == [UUID_4090, UUID_3090]
    (link,) = doc["links"]
    assert (link["index_a"], link["index_b"], link["topology"], link["p2p"]) == (0, 1, "PHB", False)
