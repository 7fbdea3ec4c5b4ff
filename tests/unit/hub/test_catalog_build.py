"""Catalog entries built from the local Hub stand-in and from public file copies."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from fakes.hub_catalog import add_entry
from testpaths import REPO

from kvpilot.core.hub.catalog_build import (
    BuildSource,
    CatalogBuildError,
    entry_from_copies,
    entry_from_hub,
    load_sources,
    merge,
)
from kvpilot.core.models import catalog
from kvpilot.core.models.catalog import _as_entry, checkpoint_spec, find

QWEN3_8B = "Qwen/Qwen3-8B"
#: the NVFP4 quantization_config layout of compressed-tensors (format name and 16-weight groups)
NVFP4_QCFG = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
              "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float",
                                                        "group_size": 16}}}}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub(cdn=False) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        found = find(QWEN3_8B)
        assert found is not None
        add_entry(fake, found[0], 0)
        yield fake


def test_an_entry_built_from_the_hub_pins_revisions_and_counts_bytes(hub: FakeHub):
    base_ckpt = find(QWEN3_8B)
    assert base_ckpt is not None
    entry = entry_from_hub(BuildSource(QWEN3_8B, "Qwen3", release_date="2025-04"))
    assert entry["id"] == QWEN3_8B and entry["family"] == "Qwen3"
    repo = hub.repos[QWEN3_8B]
    assert entry["checkpoints"][0]["revision"] == repo.sha
    assert repo.sha in entry["sources"][0]
    by_repo = {c["repo"]: c for c in entry["checkpoints"]}
    assert set(by_repo) == {QWEN3_8B, "Qwen/Qwen3-8B-AWQ", "Qwen/Qwen3-8B-FP8"}
    for name, line in by_repo.items():
        expected = find(name)
        assert expected is not None
        assert line["weights_bytes"] == expected[1].weights_bytes
        assert line["weights_source"] == "catalog"
        assert line["revision"] == hub.repos[name].sha
    assert by_repo["Qwen/Qwen3-8B-AWQ"]["method"] == "awq"
    assert by_repo["Qwen/Qwen3-8B-AWQ"]["bits"] == 4
    # the built entry is a catalog entry the planner reads like the shipped one
    built = _as_entry(entry)
    shipped = base_ckpt[0]
    assert built.params_total == shipped.params_total
    assert built.context_length == shipped.context_length
    spec = checkpoint_spec(built, built.checkpoints[1])
    assert spec.quantization is not None and spec.weights_bytes == by_repo[spec.model_id][
        "weights_bytes"]


def test_model_tree_keeps_one_variant_per_runnable_scheme(hub: FakeHub):
    config = json.loads(hub.repos[QWEN3_8B].files["config.json"])
    nvfp4 = hub.add_repo("example/Qwen3-8B-NVFP4", {"config.json": json.dumps(
        {**config, "quantization_config": NVFP4_QCFG}).encode()})
    nvfp4.tags = (f"base_model:quantized:{QWEN3_8B}",)
    nvfp4.safetensors_parameters = {"U8": 6_000_000_000}
    gguf = hub.add_repo("example/Qwen3-8B-GGUF", {"README.md": b"gguf only"})
    gguf.tags = (f"base_model:quantized:{QWEN3_8B}",)
    second_awq = hub.add_repo("example/Qwen3-8B-AWQ-copy", {"config.json": hub.repos[
        "Qwen/Qwen3-8B-AWQ"].files["config.json"]})
    second_awq.tags = (f"base_model:quantized:{QWEN3_8B}",)
    second_awq.safetensors_parameters = {"U8": 1}
    entry = entry_from_hub(BuildSource(QWEN3_8B, "Qwen3", max_variants=5))
    by_repo = {c["repo"]: c for c in entry["checkpoints"]}
    assert "example/Qwen3-8B-GGUF" not in by_repo  # no weight scheme vLLM loads here
    assert "example/Qwen3-8B-AWQ-copy" not in by_repo  # the more downloaded AWQ is kept
    line = by_repo["example/Qwen3-8B-NVFP4"]
    assert line["scheme"] == "nvfp4" and "Marlin FP4 kernel" in line["note"]
    # in the catalog, that checkpoint runs on an RTX 4090 with vLLM's Marlin FP4 kernel, and
    # is refused with the reason by a release that has none
    from kvpilot.core.base.plan import PlanInputs
    from kvpilot.core.fit.support import check_support
    from kvpilot.core.hardware.target import from_spec

    built = _as_entry(entry)
    ckpt = next(c for c in built.checkpoints if c.repo == "example/Qwen3-8B-NVFP4")
    spec = checkpoint_spec(built, ckpt)
    assert check_support(PlanInputs.on_gpu(spec, from_spec("RTX 4090", "linux"))) is None
    failure = check_support(PlanInputs.on_gpu(spec, from_spec("RTX 4090", "linux"),
                                              vllm_version="0.9.2"))
    assert failure is not None and "NVFP4" in failure.message


def test_an_unknown_repo_is_a_clear_error(hub: FakeHub):
    with pytest.raises(CatalogBuildError, match="example/missing: cannot read it from the Hub"):
        entry_from_hub(BuildSource("example/missing", "x"))


def test_an_entry_from_copies_names_its_source_and_says_when_bytes_are_estimated(tmp_path):
    folder = tmp_path / "Qwen__Qwen3-8B"
    folder.mkdir()
    real = REPO / "tests" / "data" / "models" / "qwen3-8b" / "config.json"
    (folder / "config.json").write_bytes(real.read_bytes())
    (folder / "SOURCE.txt").write_text("tests/data/models/qwen3-8b/config.json of this repo\n")
    entry = entry_from_copies(BuildSource(QWEN3_8B, "Qwen3"), tmp_path)
    line = entry["checkpoints"][0]
    assert line["weights_source"] == "estimate" and "byte size not found" in line["note"]
    assert entry["sources"] == ["tests/data/models/qwen3-8b/config.json of this repo"]
    shipped = find(QWEN3_8B)
    assert shipped is not None
    # the byte model's figure for the 16-bit checkpoint is the shipped (listed) size within 1 %
    assert abs(line["weights_bytes"] / shipped[1].weights_bytes - 1) < 0.01
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": shipped[1].weights_bytes}, "weight_map": {}}))
    counted = entry_from_copies(BuildSource(QWEN3_8B, "Qwen3"), tmp_path)["checkpoints"][0]
    assert counted["weights_source"] == "catalog"
    assert counted["weights_bytes"] == shipped[1].weights_bytes
    with pytest.raises(CatalogBuildError, match=r"no readable config\.json"):
        entry_from_copies(BuildSource("example/none", "x"), tmp_path)


def _qwen3_8b_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "Qwen__Qwen3-8B"
    folder.mkdir()
    real = REPO / "tests" / "data" / "models" / "qwen3-8b" / "config.json"
    (folder / "config.json").write_bytes(real.read_bytes())
    return folder


def test_copies_count_bytes_from_quoted_hub_counts_or_file_sizes(tmp_path):
    folder = _qwen3_8b_copy(tmp_path)
    src = BuildSource(QWEN3_8B, "Qwen3")
    (folder / "hub_safetensors.json").write_text(json.dumps({"parameters": {"BF16": 1000}}))
    line = entry_from_copies(src, tmp_path)["checkpoints"][0]
    assert (line["weights_bytes"], line["weights_source"]) == (2000, "catalog")
    assert "safetensors parameter counts (BF16 1,000)" in line["note"]
    # an index beats the counts; the counts beat file sizes
    (folder / "file_sizes.json").write_text(json.dumps(
        {"files": {"model-00001-of-00002.safetensors": 700, "model-00002-of-00002.safetensors":
                   300, "tokenizer.json": 11}}))
    assert entry_from_copies(src, tmp_path)["checkpoints"][0]["weights_bytes"] == 2000
    (folder / "hub_safetensors.json").unlink()
    line = entry_from_copies(src, tmp_path)["checkpoints"][0]
    assert line["weights_bytes"] == 1000  # only the .safetensors files
    assert "2 .safetensors files summed" in line["note"] and line["verified"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 1234}}))
    assert entry_from_copies(src, tmp_path)["checkpoints"][0]["weights_bytes"] == 1234


@pytest.mark.parametrize(("name", "text", "message"), [
    ("hub_safetensors.json", "{", "is not readable JSON"),
    ("hub_safetensors.json", "[1]", "is not a JSON object"),
    ("hub_safetensors.json", '{"parameters": {"Q9": 5}}', "with known dtypes"),
    ("file_sizes.json", '{"files": {"a.gguf": 5}}', "with .safetensors files"),
    ("file_sizes.json", '{"files": {"model.safetensors": -1}}', "with .safetensors files"),
])
def test_a_broken_byte_count_copy_is_named(tmp_path, name, text, message):
    folder = _qwen3_8b_copy(tmp_path)
    (folder / name).write_text(text)
    with pytest.raises(CatalogBuildError, match=message) as err:
        entry_from_copies(BuildSource(QWEN3_8B, "Qwen3"), tmp_path)
    assert QWEN3_8B in err.value.message and name in err.value.message


@pytest.mark.parametrize(("folder", "repo", "counted"), [
    # the Hub's count, 8,767,123,696 BF16 parameters (scripts/catalog_copies/*/SOURCE.txt)
    ("qwen3-vl-8b-instruct", "Qwen/Qwen3-VL-8B-Instruct", 17_534_247_392),
    # the Hub's model.safetensors file size
    ("gemma-4-e2b-it", "google/gemma-4-E2B-it", 10_246_621_918),
    ("gemma-4-e4b-it", "google/gemma-4-E4B-it", 15_992_595_884),
    # the index copy's metadata.total_size
    ("phi-4-mini-instruct", "microsoft/Phi-4-mini-instruct", 7_672_043_520),
])
def test_shipped_entries_carry_the_counted_bytes_and_the_byte_model_agrees(
        folder: str, repo: str, counted: int) -> None:
    from kvpilot.core.models.local import load_local_model

    found = find(repo)
    assert found is not None
    _, ckpt = found
    assert (ckpt.weights_source, ckpt.weights_bytes) == ("catalog", counted)
    # the figure config.json alone would have given: Qwen3-VL exact, Gemma 4 E2B -0.53 %,
    # E4B -0.35 % (a model folder with an index reads the index)
    estimate = load_local_model(REPO / "tests" / "data" / "models" / folder).weights_bytes
    assert estimate is not None and abs(estimate / counted - 1) < 0.006


def test_merge_replaces_by_id_and_appends_new_entries(tmp_path):
    data = {"schema": 1, "entries": [{"id": "A/a", "v": 1}, {"id": "B/b", "v": 1}]}
    merged = merge(data, [{"id": "b/B", "v": 2}, {"id": "C/c", "v": 1}])
    assert [(e["id"], e["v"]) for e in merged["entries"]] == [("A/a", 1), ("b/B", 2),
                                                              ("C/c", 1)]
    sources = tmp_path / "s.json"
    sources.write_text(json.dumps({"models": [{"id": "A/a", "family": "A", "max_variants": 2}]}))
    assert load_sources(sources)[0].max_variants == 2
    sources.write_text("{}")
    with pytest.raises(CatalogBuildError):
        load_sources(sources)
    assert catalog.catalog_entries()  # the shipped catalog is untouched


def test_the_build_script_writes_built_entries_into_a_catalog(hub: FakeHub, tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_catalog",
                                                  REPO / "scripts" / "build_catalog.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"models": [{"id": QWEN3_8B, "family": "Qwen3"}]}))
    target = tmp_path / "catalog.json"
    target.write_text(json.dumps({"schema": 1, "entries": [{"id": "A/a"}]}))
    assert script.main([str(sources), "--catalog", str(target)]) == 0
    written = json.loads(target.read_text())
    assert [e["id"] for e in written["entries"]] == ["A/a", QWEN3_8B]
    assert "Qwen/Qwen3-8B: 16-bit 15.3 GiB, awq 5.7 GiB" in capsys.readouterr().out
    sources.write_text(json.dumps({"models": [{"id": "example/missing", "family": "x"}]}))
    assert script.main([str(sources), "--catalog", str(target)]) == 2
    assert "example/missing" in capsys.readouterr().err


@pytest.mark.parametrize(("folder", "repo"), [
    ("qwen3.5-27b", "Qwen/Qwen3.5-27B"),
    ("nemotron-3-nano-30b-a3b", "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
    ("gemma-4-31b-it-nvfp4", "nvidia/Gemma-4-31B-IT-NVFP4"),
    ("qwen3.6-27b-nvfp4", "nvidia/Qwen3.6-27B-NVFP4"),  # MIXED_PRECISION, module by module
])
def test_a_catalog_estimate_is_the_one_a_model_folder_gets(folder: str, repo: str) -> None:
    """A checkpoint known only by its config.json is sized by one rule, whether the catalog
    builder or a model folder without weights reads it (the hybrids' state layers and the
    towers included); a 16-bit one holds 2 bytes per parameter at least. Where a published
    size has since replaced the catalog's estimate, it lies at or above that count (the
    uploads keep modules 16-bit the count prices at 4 or 8 bits)."""
    from kvpilot.core.models.local import load_local_model

    from_folder = load_local_model(REPO / "tests" / "data" / "models" / folder)
    found = find(repo)
    assert found is not None
    entry, ckpt = found
    built = entry_from_copies(BuildSource(repo, entry.family), REPO / "scripts" / "catalog_copies")
    assert built["checkpoints"][0]["weights_bytes"] == from_folder.weights_bytes
    if ckpt.weights_source == "estimate":
        assert ckpt.weights_bytes == from_folder.weights_bytes
    else:
        assert ckpt.weights_bytes >= from_folder.weights_bytes
    if ckpt.method is None:
        assert ckpt.weights_bytes >= 2 * entry.params_total > 0


def test_a_modelopt_copy_takes_its_quantization_from_hf_quant_config(tmp_path: Path):
    folder = tmp_path / "example__Nano-NVFP4"
    folder.mkdir()
    shipped = REPO / "scripts" / "catalog_copies" / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4"
    config = json.loads((shipped / "config.json").read_text())
    assert "quantization_config" not in config  # the ModelOpt section lives beside it
    (folder / "config.json").write_text(json.dumps(config))
    bf16 = entry_from_copies(BuildSource("example/Nano-NVFP4", "Nemotron 3"), tmp_path)
    (folder / "hf_quant_config.json").write_text((shipped / "hf_quant_config.json").read_text())
    fp4 = entry_from_copies(BuildSource("example/Nano-NVFP4", "Nemotron 3"), tmp_path)
    line = fp4["checkpoints"][0]
    assert line["scheme"] == "nvfp4" and line["bits"] == 4 and line["group_size"] == 16
    assert fp4["config"]["quantization_config"]["quant_method"] == "modelopt"
    # the excluded attention/Mamba layers stay 16-bit: well above a quarter of the BF16 bytes
    ratio = line["weights_bytes"] / bf16["checkpoints"][0]["weights_bytes"]
    assert 0.25 < ratio < 0.35, ratio
