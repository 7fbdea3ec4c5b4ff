"""The 2026 checkpoints for one card, planned from their published config.json
(tests/data/models/*/SOURCE.txt names each copy): Gemma 4 E2B and E4B (per-layer embeddings,
KV-shared layers, audio and vision towers), Devstral Small 2507 (a Mistral Small 3.1-shaped
decoder) and Phi-4-mini (a partial-rotary dense decoder with tied embeddings).

Known sizes: Devstral's ``model.safetensors.index.json`` gives ``metadata.total_size``; for
Gemma 4 E2B the calibration case ``l4-gemma4-e2b-bf16-8k-u0.90-eager-v0210``
(/work/shared/reference/calibration_cases_more.json, vLLM 0.21.0 on an L4) logs "Checkpoint size:
9.54 GiB" for google/gemma-4-E2B, the base checkpoint of the same architecture; Gemma 4 E4B's
single model.safetensors is 15,992,595,884 bytes on the Hub (its SOURCE.txt).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fitkit import MODELS, rtx4090

from kvpilot.core.base.model_spec import FULL_ATTENTION, SLIDING_ATTENTION, SOURCE_ESTIMATE
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import kv
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.models.bytemodel import estimate_weight_bytes
from kvpilot.core.models.bytemodel_hybrid import tower_params
from kvpilot.core.models.local import load_local_model, spec_from_config, text_config_of


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


def _config_only(name: str, tmp_path: Path) -> Path:
    """The fixture's config.json alone in a model directory (no index, no shards)."""
    root = tmp_path / name
    root.mkdir()
    shutil.copy(MODELS / name / "config.json", root / "config.json")
    return root


def test_gemma4_e2b_layers_and_kv_shared_cache() -> None:
    spec = spec_from_config(_config("gemma-4-e2b-it"), model_id="google/gemma-4-E2B-it")
    assert spec.architecture_known and spec.is_multimodal
    assert spec.num_hidden_layers == 35 and spec.kv_shared_layers == 20
    assert spec.layer_types.count(FULL_ATTENTION) == 7
    assert spec.layer_types.count(SLIDING_ATTENTION) == 28
    assert (spec.head_dim, spec.global_head_dim, spec.num_key_value_heads) == (256, 512, 1)
    layout = kv.kv_layout(spec)
    # only layers 0-14 own a cache (vLLM's kv_sharing_target_layer_name for 15-34): 12 sliding
    # x (K+V) x 1 head x 256 x 2 bytes + 3 full x (K+V) x 1 x 512 x 2
    assert layout.kv_bytes_per_token == 12 * 2 * 256 * 2 + 3 * 2 * 512 * 2 == 18_432
    # vLLM's hybrid grouping: the 3 full layers in one group, the 12 sliding ones in four
    assert layout.group_size == 3 and len(layout.groups) == 5
    assert [g.kind for g in layout.groups].count(FULL_ATTENTION) == 1
    cap = compute_capacity(rtx4090(spec, max_model_len=32_768, vllm_version="0.21.0"))
    assert cap.verdict in ("fits", "borderline")


def test_gemma4_e2b_weights_from_config_alone(tmp_path: Path) -> None:
    cfg = _config("gemma-4-e2b-it")
    spec = load_local_model(_config_only("gemma-4-e2b-it", tmp_path))
    assert spec.weights_source == SOURCE_ESTIMATE
    text = text_config_of(cfg)
    # per-layer embeddings: 262,144 x 35 layers x 256, 16-bit: 4.375 GiB of the total
    assert text["vocab_size_per_layer_input"] * 35 * 256 * 2 / GiB == pytest.approx(4.375)
    towers = 2 * tower_params(cfg)
    assert 0.5 * GiB < towers < 1.0 * GiB  # vision (16 layers of 768) and audio (12 of 1024)
    # within 3 % of the 9.54 GiB checkpoint vLLM 0.21.0 logged for the E2B architecture
    assert spec.weights_bytes is not None
    assert spec.weights_bytes / GiB == pytest.approx(9.54, rel=0.03)
    # the text model alone against the 8.89 GiB vLLM loaded with --language-model-only
    text_only = estimate_weight_bytes(spec, spec.quantization, text)
    assert text_only / GiB == pytest.approx(8.89, rel=0.03)


#: the Hub's model.safetensors of google/gemma-4-E4B-it, in bytes (its header included: a few
#: hundred KB of JSON at most, 0.002 % of the file)
GEMMA4_E4B_FILE_BYTES = 15_992_595_884


def test_gemma4_e4b_layers_and_kv_shared_cache() -> None:
    spec = spec_from_config(_config("gemma-4-e4b-it"), model_id="google/gemma-4-E4B-it")
    assert spec.architecture_known and spec.is_multimodal
    assert spec.num_hidden_layers == 42 and spec.kv_shared_layers == 18
    # every sixth layer is global: 7 of 42
    assert spec.layer_types.count(FULL_ATTENTION) == 7
    assert (spec.head_dim, spec.global_head_dim, spec.num_key_value_heads) == (256, 512, 2)
    layout = kv.kv_layout(spec)
    # layers 0-23 own a cache, 24-41 read it: 20 sliding x (K+V) x 2 heads x 256 x 2 bytes
    # + 4 full x (K+V) x 2 x 512 x 2
    assert layout.kv_bytes_per_token == 20 * 2 * 2 * 256 * 2 + 4 * 2 * 2 * 512 * 2 == 57_344
    # the 4 full layers in one group, the 20 sliding ones in five of four
    assert layout.group_size == 4 and len(layout.groups) == 6
    assert [g.kind for g in layout.groups].count(FULL_ATTENTION) == 1
    # three times E2B's 18,432 B/token: E4B doubles the KV heads and shares fewer layers
    assert layout.kv_bytes_per_token / 18_432 == pytest.approx(3.11, abs=0.01)
    cap = compute_capacity(rtx4090(spec, max_model_len=32_768, vllm_version="0.21.0"))
    assert cap.verdict in ("fits", "borderline")


def test_gemma4_e4b_weights_from_config_alone(tmp_path: Path) -> None:
    cfg = _config("gemma-4-e4b-it")
    spec = load_local_model(_config_only("gemma-4-e4b-it", tmp_path))
    assert spec.weights_source == SOURCE_ESTIMATE and spec.weights_bytes is not None
    text = text_config_of(cfg)
    # per-layer embeddings: 262,144 x 42 layers x 256, 16-bit: 5.25 GiB, a third of the file
    per_layer = text["vocab_size_per_layer_input"] * 42 * 256 * 2
    assert per_layer / GiB == pytest.approx(5.25)
    assert per_layer / GEMMA4_E4B_FILE_BYTES == pytest.approx(0.35, abs=0.01)
    towers = 2 * tower_params(cfg)
    assert 0.5 * GiB < towers < 1.0 * GiB  # the same vision and audio towers as E2B
    # the whole checkpoint from config.json alone, against the Hub's file: within 3 %
    # (measured: 15,937,079,380 B, -0.35 %)
    assert spec.weights_bytes == pytest.approx(GEMMA4_E4B_FILE_BYTES, rel=0.03)
    assert abs(spec.weights_bytes / GEMMA4_E4B_FILE_BYTES - 1) < 0.01
    # --language-model-only leaves the towers on disk: the text model alone
    text_only = estimate_weight_bytes(spec, spec.quantization, text)
    assert text_only == pytest.approx(spec.weights_bytes - towers, rel=0.01)


#: metadata.total_size of microsoft/Phi-4-mini-instruct's model.safetensors.index.json, as kept
#: beside its config.json copy (tests/data/models/phi-4-mini-instruct/SOURCE.txt: the same
#: repository and commit, main/tokenizer/phi4-mini/model.safetensors.index.json)
PHI4_MINI_TOTAL_SIZE = 7_672_043_520


def test_phi4_mini_from_config_alone(tmp_path: Path) -> None:
    spec = load_local_model(_config_only("phi-4-mini-instruct", tmp_path))
    assert spec.architecture == "Phi3ForCausalLM" and spec.architecture_known
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (32, 8, 128)
    # partial_rotary_factor 0.75 rotates 96 of 128 dims; the cache holds all 128
    assert kv.kv_layout(spec).kv_bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    # tied embeddings (200,064 x 3,072) counted once: the index's total to the byte
    assert spec.weights_source == SOURCE_ESTIMATE
    assert spec.weights_bytes == PHI4_MINI_TOTAL_SIZE
    # 7.1 GiB of weights: 64k tokens fit a 4090, the full 128k (16 GiB of KV) does not
    cap = compute_capacity(rtx4090(spec, max_model_len=65_536, vllm_version="0.21.0"))
    assert cap.verdict == "fits" and cap.max_concurrency >= 1
    full = compute_capacity(rtx4090(spec, max_model_len=131_072, vllm_version="0.21.0"))
    assert full.verdict == "does_not_fit"


def test_devstral_small_2507_from_config_and_its_index(tmp_path: Path) -> None:
    spec = spec_from_config(_config("devstral-small-2507"),
                            model_id="mistralai/Devstral-Small-2507")
    assert spec.architecture == "MistralForCausalLM" and spec.architecture_known
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (40, 8, 128)
    # 40 x (K+V) x 8 x 128 x 2 bytes: the figure Mistral Small 3.1 / 3.2 logs in vLLM
    assert kv.kv_layout(spec).kv_bytes_per_token == 163_840
    index = json.loads((MODELS / "devstral-small-2507" / "model.safetensors.index.json")
                       .read_text())
    total = index["metadata"]["total_size"]
    assert total == 47_144_806_400
    from_config = load_local_model(_config_only("devstral-small-2507", tmp_path))
    assert from_config.weights_bytes is not None
    assert from_config.weights_bytes == pytest.approx(total, rel=0.03)
    assert abs(from_config.weights_bytes / total - 1) < 0.001  # a plain dense decoder
    # with the index beside it the checkpoint's own figure is used
    root = tmp_path / "with-index"
    shutil.copytree(MODELS / "devstral-small-2507", root)
    assert load_local_model(root).weights_bytes == total
