"""Families the catalog gained for 24-32 GB cards: GLM-4.7-Flash, Nemotron 3 Nano's FP8 upload and
Ministral 3 8B/14B. Each is read by the planner, names where its facts come from and says which of
its sizes are estimates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvpilot.core.base.model_spec import SOURCE_ESTIMATE
from kvpilot.core.fit import kv
from kvpilot.core.models import catalog
from kvpilot.core.models.quality import figure_for

DATA = Path(__file__).resolve().parents[2] / "data" / "models"
NEW = (
    "zai-org/GLM-4.7-Flash",
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8",
    "mistralai/Ministral-3-8B-Instruct-2512",
    "mistralai/Ministral-3-14B-Instruct-2512",
)


def _public_reference(source: str) -> bool:
    return "https://" in source or "github:" in source


@pytest.mark.parametrize("model", NEW)
def test_each_new_entry_is_planned_dated_and_sourced(model: str) -> None:
    found = catalog.find(model)
    assert found is not None, model
    entry, _ = found
    assert entry.release_date and _public_reference(entry.release_date_source), model
    assert entry.sources and all(_public_reference(s) for s in entry.sources), model
    for ckpt in entry.checkpoints:
        spec = catalog.get(ckpt.repo)  # raises if the planner cannot read it
        assert spec.architecture_known, ckpt.repo
        # no byte count of these uploads was published: the figure is the byte model's, said so
        assert ckpt.weights_source == "estimate" and spec.weights_source == SOURCE_ESTIMATE
        assert "byte size not found" in ckpt.note, ckpt.repo


def test_glm_47_flash_is_the_public_config_copy_planned_as_mla() -> None:
    entry, _ = catalog.find("zai-org/GLM-4.7-Flash") or pytest.fail("not in the catalog")
    fixture = json.loads((DATA / "glm-4.7-flash" / "config.json").read_text(encoding="utf-8"))
    assert entry.config == fixture
    spec = catalog.get("zai-org/GLM-4.7-Flash")
    assert spec.architecture == "Glm4MoeLiteForCausalLM"
    assert spec.mla is not None and spec.moe is not None
    # one latent row per token and layer: kv_lora_rank 512 + rope 64, 16-bit, over 47 layers
    assert kv.kv_layout(spec).kv_bytes_per_token == 47 * (512 + 64) * 2
    assert spec.derived_max_model_len == 202752


def test_glm_47_flash_carries_its_model_cards_swe_bench_verified_figure() -> None:
    coding = figure_for("zai-org/GLM-4.7-Flash", "coding")
    assert coding.rated and coding.score == pytest.approx(59.2)
    assert "README_modelcard_GLM-4.7-Flash.md" in coding.source
    assert not figure_for("zai-org/GLM-4.7-Flash", "chat").rated  # no Index v4.0 figure found


def test_nemotron_fp8_upload_lies_between_its_nvfp4_and_bf16_uploads() -> None:
    bf16 = catalog.get("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
    fp8 = catalog.get("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8")
    nvfp4 = catalog.get("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4")
    assert fp8.quantization is not None and (fp8.quantization.method, fp8.quantization.bits) == (
        "modelopt", 8)
    assert fp8.layer_types == bf16.layer_types and fp8.num_key_value_heads == 2
    assert nvfp4.weights_bytes < fp8.weights_bytes < bf16.weights_bytes
    # the attention layers and the Mamba layers feeding them stay BF16: above a plain half
    assert fp8.weights_bytes > bf16.weights_bytes / 2


@pytest.mark.parametrize(("model", "card_b", "tolerance"), [
    ("mistralai/Ministral-3-14B-Instruct-2512", 13.5e9, 0.001),  # '13.5B Language Model'
    ("mistralai/Ministral-3-8B-Instruct-2512", 8.4e9, 0.011),  # '8.4B': the dims give 8.49 B
])
def test_ministral_3_dimensions_give_the_cards_language_model_size(
    model: str, card_b: float, tolerance: float
) -> None:
    entry, _ = catalog.find(model) or pytest.fail("not in the catalog")
    assert abs(entry.params_total - card_b) / card_b < tolerance, entry.params_total
    spec = catalog.get(model)
    assert spec.is_multimodal and spec.quantization is not None
    assert spec.quantization.method == "fp8"  # the Instruct weights are published in FP8


def _recommend(goal: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
               capsys: Any) -> dict[str, Any]:
    from kvpilot.core import cli

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert cli.main(["recommend", *goal, "--limit", "500", "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_on_the_4090_ministral_is_planned_unrated_and_the_large_uploads_say_why_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any
) -> None:
    out = _recommend(["--use-case", "chat", "--context", "8k", "--users", "4"],
                     monkeypatch, tmp_path, capsys)
    planned = {c["model"]: c for c in out["candidates"]}
    for model in NEW[2:]:
        assert model in planned, model
        assert planned[model]["quality"]["score"] is None  # ranked by the fallback, shown unrated
    rejected = {r["model"]: r["reason"] for r in out["rejected"]}
    for model in NEW[:2]:  # 55.8 GiB of BF16 and 30.1 GiB of FP8 weights on a 24 GB card
        assert model in rejected and "GiB" in rejected[model], model
