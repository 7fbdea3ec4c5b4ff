"""GPU spec lookup by PCI id and by name, from resources/gpus.json."""

from __future__ import annotations

import json

import pytest
from testpaths import DATA

from kvpilot.core.hardware.specs import (
    all_specs,
    lookup,
    normalize_name,
    normalize_pci_device_id,
)

MiB = 1024**2


@pytest.mark.parametrize(
    "name",
    ["RTX 4090", "rtx4090", "NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "4090", "rtx-4090"],
)
def test_4090_names_resolve(name: str) -> None:
    spec = lookup(None, name)
    assert spec is not None
    assert spec.short_name == "RTX 4090"
    assert spec.memory_total_bytes == 24564 * MiB
    assert spec.compute_capability == (8, 9)
    assert spec.bandwidth_bytes_per_s == 1008 * 10**9
    assert spec.bf16_dense_tflops == pytest.approx(165.2)
    assert spec.fp8_kv_supported
    # every figure is from a source but the WSL2 CUDA total (derived from an RTX 4080's log)
    assert spec.unverified_fields == {"cuda_total_bytes.wsl2"}
    assert spec.sources


@pytest.mark.parametrize("pci", ["0x2684", "2684", "0x268410DE", "0X268410de"])
def test_pci_id_forms(pci: str) -> None:
    spec = lookup(pci, None)
    assert spec is not None and spec.short_name == "RTX 4090"


def test_pci_id_wins_over_name() -> None:
    spec = lookup("0x2685", "NVIDIA GeForce RTX 4090")
    assert spec is not None and spec.short_name == "RTX 4090 D"


def test_unknown_pci_id_falls_back_to_name() -> None:
    spec = lookup("0xffff", "NVIDIA GeForce RTX 3090")
    assert spec is not None and spec.short_name == "RTX 3090"


@pytest.mark.parametrize("name", ["RTX PRO 6000", "rtx pro 6000", "RTX PRO 6000 Blackwell",
                                  "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"])
def test_the_rtx_pro_6000_resolves_by_the_name_people_use(name: str) -> None:
    # the only RTX PRO 6000 the table knows is the Blackwell board (its three editions share
    # the 96 GB of memory); the Ada "RTX 6000" is another name
    spec = lookup(None, name)
    assert spec is not None and spec.short_name == "RTX PRO 6000 Blackwell"
    assert lookup(None, "RTX 6000 Ada") is not spec


def test_unknown_gpu_is_none() -> None:
    assert lookup(None, "NVIDIA GeForce GTX 1080") is None
    assert lookup(None, None) is None
    assert lookup("not-hex", None) is None


def test_shared_nvml_name_is_split_by_memory() -> None:
    small = lookup(None, "NVIDIA GeForce RTX 4060 Ti", memory_total_bytes=8188 * MiB)
    large = lookup(None, "NVIDIA GeForce RTX 4060 Ti", memory_total_bytes=16380 * MiB)
    assert small is not None and small.short_name == "RTX 4060 Ti 8GB"
    assert large is not None and large.short_name == "RTX 4060 Ti 16GB"


def test_fp8_kv_follows_compute_capability() -> None:
    by_short = {s.short_name: s for s in all_specs()}
    assert by_short["RTX 3090"].compute_capability == (8, 6)
    assert not by_short["RTX 3090"].fp8_kv_supported
    assert by_short["RTX 4080"].fp8_kv_supported
    assert (
        by_short["RTX 5090"].compute_capability == (12, 0) and by_short["RTX 5090"].fp8_kv_supported
    )
    assert not by_short["A100 80GB SXM4"].fp8_kv_supported
    for spec in all_specs():
        assert spec.fp8_kv_supported == (spec.compute_capability >= (8, 9))


def test_unverified_values_are_marked() -> None:
    by_short = {s.short_name: s for s in all_specs()}
    assert not by_short["RTX 3090"].is_verified("compute_capability")  # inferred from the die
    assert by_short["RTX 3090"].is_verified("memory_total_bytes")
    super_ = by_short["RTX 4080 SUPER"]
    assert not super_.is_verified("memory_total_bytes")  # no nvidia-smi total was found
    assert not super_.fully_verified
    assert super_.notes and "assumed" in super_.notes


def test_every_entry_has_sources_unique_names_and_ids() -> None:
    specs = all_specs()
    assert len(specs) >= 20
    assert len({s.name for s in specs}) == len(specs)
    ids = [normalize_pci_device_id(i) for s in specs for i in s.pci_device_ids]
    assert None not in ids and len(set(ids)) == len(ids)
    allowed = {
        "compute_capability",
        "memory_total_bytes",
        "bandwidth_bytes_per_s",
        "bf16_dense_tflops",
        "power_limit_w",
        "cuda_total_bytes.linux",
        "cuda_total_bytes.wsl2",
    }
    for spec in specs:
        assert spec.sources, spec.name
        assert spec.unverified_fields <= allowed, spec.name
        assert spec.memory_total_bytes % MiB == 0
        assert lookup(spec.pci_device_ids[0], None) is spec
        assert lookup(None, spec.name) is not None


def test_totals_agree_with_the_reference_table() -> None:
    # a copy of the collected reference table's memory column, inside the repository
    path = DATA / "reference" / "gpus_nvml_totals.json"
    ref = json.loads(path.read_text())["gpus"]
    checked = 0
    for entry in ref:
        ids = entry["pci_device_id"].split()[0]
        spec = lookup(ids, None)
        if spec is None or entry.get("nvml_total_MiB") is None:
            continue
        if spec.name.endswith(" D") or "8GB" in spec.name:
            continue
        assert spec.memory_total_bytes == entry["nvml_total_MiB"] * MiB, spec.name
        checked += 1
    assert checked >= 15


def test_normalizers() -> None:
    assert normalize_name("NVIDIA GeForce RTX 4090") == "rtx4090"
    assert normalize_name("NVIDIA A100-SXM4-80GB") == "a100sxm480gb"
    assert normalize_pci_device_id(0x2684) == "0x2684"
    assert normalize_pci_device_id("0x26841002") is None  # vendor part is not NVIDIA's
    assert normalize_pci_device_id("") is None


def test_cuda_totals_per_platform_come_from_vllm_reports() -> None:
    """What vLLM multiplies by the utilization, per platform: the reported figure where a vLLM
    log gave one (the source says which), else an estimate below NVML's total on Linux."""
    by_short = {s.short_name: s for s in all_specs()}
    rtx4090 = by_short["RTX 4090"]
    linux, source = rtx4090.cuda_total("linux")
    assert linux == 24218 * MiB and round(linux / 2**30, 2) == 23.65
    assert "reported by vLLM" in source
    wsl2, source = rtx4090.cuda_total("wsl2")
    assert wsl2 == rtx4090.memory_total_bytes and "derived" in source
    assert round(by_short["RTX 3090"].cuda_total("linux")[0] / 2**30, 2) == 23.57
    assert round(by_short["L40S"].cuda_total("linux")[0] / 2**30, 2) == 44.42
    assert round(by_short["A10"].cuda_total("linux")[0] / 2**30, 2) == 22.06
    # no vLLM report of an RTX 5090: NVML's total less 2 %, said to be an estimate
    rtx5090 = by_short["RTX 5090"]
    estimate, source = rtx5090.cuda_total("linux")
    assert estimate < rtx5090.memory_total_bytes and estimate % MiB == 0
    assert estimate == rtx5090.memory_total_bytes - round(32607 * 0.02) * MiB
    assert "estimated" in source
    for spec in all_specs():
        assert spec.cuda_total("linux")[0] < spec.memory_total_bytes, spec.name
        assert spec.cuda_total("wsl2")[0] <= spec.memory_total_bytes, spec.name
        assert bool(spec.cuda_total_sources) == bool(spec.cuda_totals_bytes), spec.name
    with pytest.raises(ValueError, match="unknown platform"):
        rtx4090.cuda_total("windows")
