"""Vision-language checkpoints read from their published config.json files."""

from __future__ import annotations

import json

import pytest
from testpaths import DATA

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_ESTIMATE
from kvpilot.core.models.bytemodel import param_breakdown
from kvpilot.core.models.local import load_local_model, spec_from_config, text_config_of

DATA_DIR = DATA / "models"

#: (fixture, family, tokens per image, encoder positions per image, total parameters that the
#: model card publishes: text model + vision tower + projector)
FAMILIES = [
    ("qwen2-vl-7b-instruct", "qwen2_vl", 16384, 65536, 8_291_375_616),
    ("qwen2.5-vl-7b-instruct", "qwen2_5_vl", 16384, 65536, 8_292_166_656),
    ("mistral-small-3.1-24b-instruct-2503", "mistral3", 3080, 12100, 24_011_361_280),
    ("llava-1.5-7b-hf", "llava", 576, 577, 7_063_427_072),
    ("gemma-3-12b-it", "gemma3", 256, 4096, None),
    ("qwen3-vl-30b-a3b-instruct", "qwen3_vl", 16384, 65536, 31_070_754_032),
]


def _config(name: str) -> dict:
    return json.loads((DATA_DIR / name / "config.json").read_text())


@pytest.mark.parametrize(("name", "family", "tokens", "patches", "published"), FAMILIES)
def test_vision_families_from_published_configs(model_copy, name, family, tokens, patches,
                                                published):
    spec = load_local_model(model_copy(name))
    assert spec.is_multimodal and spec.architecture_known
    assert spec.vision is not None
    assert spec.vision.family == family
    assert spec.vision.max_image_tokens == tokens
    assert spec.vision.max_image_patches == patches
    if published is not None:
        cfg = _config(name)
        text = param_breakdown(spec, text_config_of(cfg)).total_params
        assert text + spec.vision.params == published


def test_gemma3_vision_params_match_the_catalog_figure():
    cfg = json.loads(json.dumps(_config("gemma-3-12b-it")))
    spec = spec_from_config(cfg, model_id="google/gemma-3-12b-it")
    # 27 SigLIP layers at 1152 wide, 64 x 64 positions, projector into the 3840-wide text model
    assert spec.vision is not None
    assert spec.vision.params == 421_290_864


def test_qwen_vl_text_dims_and_video():
    spec = spec_from_config(_config("qwen2.5-vl-7b-instruct"), model_id="q")
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (28, 4, 128)
    assert spec.derived_max_model_len == 128000
    assert spec.layer_types == ()  # use_sliding_window false: full attention
    assert spec.vision is not None and spec.vision.supports_video
    assert spec.vision.tower_skippable_since == (0, 10, 1)


def test_qwen3_vl_moe_text_and_deepstack_output_width():
    spec = spec_from_config(_config("qwen3-vl-30b-a3b-instruct"), model_id="q3")
    assert spec.moe is not None and spec.moe.num_experts == 128
    assert spec.moe.num_experts_per_tok == 8
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (48, 4, 128)
    assert spec.vision is not None
    # main embedding plus three deepstack feature sets, each 2048 wide
    assert spec.vision.text_hidden_size == 4 * 2048


def test_mllama_is_read_with_its_cross_attention_layers():
    spec = spec_from_config(_config("llama-3.2-11b-vision-instruct"), model_id="m")
    assert spec.architecture == "MllamaForConditionalGeneration"
    assert spec.architecture_known
    assert spec.num_hidden_layers == 40  # 32 self-attention + 8 cross-attention layers
    assert spec.vision is not None
    assert spec.vision.cross_attention_layers == (3, 8, 13, 18, 23, 28, 33, 38)
    assert spec.vision.max_image_tokens == 4 * 1601
    assert spec.vision.last_vllm_release == (0, 10, 2)
    assert any("cross-attention" in n for n in spec.notes)
    # published total 10,670,220,835; kvpilot's count misses only the cross layers' q/k norms
    # and gates and the 8 extra embedding rows (34,832 parameters)
    text = param_breakdown(spec, text_config_of(_config("llama-3.2-11b-vision-instruct")))
    assert abs(text.total_params + spec.vision.params - 10_670_220_835) == 34_832


def test_llava_sparse_text_config_uses_llama_defaults():
    spec = spec_from_config(_config("llava-1.5-7b-hf"), model_id="llava")
    assert (spec.hidden_size, spec.num_hidden_layers, spec.intermediate_size) == (4096, 32, 11008)
    assert spec.vocab_size == 32064 and spec.derived_max_model_len == 4096
    assert any("LlamaConfig defaults" in n for n in spec.notes)


def test_preprocessor_max_pixels_sets_the_largest_image(model_copy):
    d = model_copy("qwen2-vl-7b-instruct")
    pre = json.loads((d / "preprocessor_config.json").read_text())
    pre["max_pixels"] = 2700 * 28 * 28
    (d / "preprocessor_config.json").write_text(json.dumps(pre))
    spec = load_local_model(d)
    assert spec.vision is not None
    assert (spec.vision.max_image_tokens, spec.vision.max_image_patches) == (2700, 10800)


def test_estimated_weights_include_the_vision_tower(model_copy):
    d = model_copy("qwen2-vl-7b-instruct")  # config only: no safetensors
    spec = load_local_model(d)
    assert spec.weights_source == SOURCE_ESTIMATE
    assert spec.weights_bytes == 2 * 8_291_375_616


def test_missing_vision_field_is_named():
    cfg = _config("qwen2-vl-7b-instruct")
    del cfg["vision_config"]["embed_dim"]
    with pytest.raises(ModelSpecError) as err:
        spec_from_config(cfg, model_id="q", config_path="x/config.json")
    assert err.value.field == "vision_config.embed_dim"


@pytest.mark.parametrize(
    ("name", "field", "bad"),
    [
        ("gemma-3-12b-it", "mm_tokens_per_image", "lots"),
        ("mistral-small-3.1-24b-instruct-2503", "spatial_merge_size", 0),
        ("mistral-small-3.1-24b-instruct-2503", "spatial_merge_size", True),
    ],
)
def test_a_bad_top_level_vision_field_is_named_not_replaced(name, field, bad):
    """A value that is not a positive integer is an error naming the field (it used to become
    the default silently); a missing one takes the default."""
    cfg = _config(name)
    cfg[field] = bad
    with pytest.raises(ModelSpecError) as err:
        spec_from_config(cfg, model_id="m", config_path="x/config.json")
    assert err.value.field == field and "positive integer" in str(err.value)
    del cfg[field]
    assert spec_from_config(cfg, model_id="m", config_path="x/config.json").vision is not None


def test_vision_architecture_without_vision_config_is_refused():
    cfg = _config("mistral-small-3.1-24b-instruct-2503")
    del cfg["vision_config"]
    with pytest.raises(ModelSpecError) as err:
        spec_from_config(cfg, model_id="m")
    assert err.value.field == "vision_config"


#: fixture folder (a published config.json) -> the catalog entry of the same model
CATALOG_TWINS = {
    "qwen2.5-7b-instruct": "Qwen/Qwen2.5-7B-Instruct",
    "llama-3.1-8b-instruct": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "gemma-2-9b-it": "google/gemma-2-9b-it",
    "gemma-3-12b-it": "google/gemma-3-12b-it",
    "glm-4-9b-chat": "THUDM/glm-4-9b-chat",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "deepseek-v2-lite": "deepseek-ai/DeepSeek-V2-Lite-Chat",
}

_MEMORY_FIELDS = (
    "architecture", "num_hidden_layers", "hidden_size", "intermediate_size",
    "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
    "max_position_embeddings", "rope_scaling_factor", "tie_word_embeddings", "layer_types",
    "sliding_window", "mla", "moe", "vision",
)


@pytest.mark.parametrize(("folder", "entry"), sorted(CATALOG_TWINS.items()))
def test_catalog_entries_read_like_their_published_config(folder, entry):
    from kvpilot.core.models import catalog

    real = spec_from_config(_config(folder), model_id=folder)
    bundled = catalog.get(entry)
    for name in _MEMORY_FIELDS:
        assert getattr(bundled, name) == getattr(real, name), (entry, name)


def test_hub_metadata_record_carries_the_processor_limit(tmp_path, monkeypatch):
    """A Hub lookup cached on disk keeps the checkpoint's preprocessor_config.json, so the
    largest image is the checkpoint's own (no network in this test: the record is cached)."""
    from kvpilot.core.hub import metadata as hub

    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path))
    record = {
        "config": _config("qwen2-vl-7b-instruct"),
        "weights_bytes": 16_582_751_232,
        "sha": "abc",
        "preprocessor": {"max_pixels": 1280 * 28 * 28},
    }
    path = tmp_path / "hub-metadata" / "org--vl.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    spec = hub.fetch_hub_model("org/vl")
    assert spec.vision is not None and spec.vision.max_image_tokens == 1280
    assert spec.weights_bytes == 16_582_751_232
