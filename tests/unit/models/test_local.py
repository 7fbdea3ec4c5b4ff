"""config.json -> ModelSpec, as vLLM reads the fields (real configs under tests/data/models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    SLIDING_ATTENTION,
    SOURCE_ESTIMATE,
    SOURCE_FILE,
    Quantization,
)
from kvpilot.core.models.local import (
    SUPPORTED_ARCHITECTURES,
    load_local_model,
    parse_quantization,
    spec_from_config,
)


def _config(d: Path) -> dict:
    return json.loads((d / "config.json").read_text())


def _rewrite(d: Path, **changes: object) -> None:
    cfg = _config(d)
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (d / "config.json").write_text(json.dumps(cfg))


def test_qwen25_7b_shape(model_copy):
    spec = load_local_model(model_copy("qwen2.5-7b-instruct"))
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (28, 4, 128)
    assert spec.architecture == "Qwen2ForCausalLM"
    # sliding_window 131072 is written but use_sliding_window is false: all layers full
    assert spec.sliding_window is None
    assert spec.resolved_layer_types == (FULL_ATTENTION,) * 28
    assert spec.derived_max_model_len == 32768
    assert spec.quantization is None
    assert not spec.tie_word_embeddings


def test_llama31_8b_shape_and_llama3_rope_not_extending(model_copy):
    spec = load_local_model(model_copy("llama-3.1-8b-instruct"))
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (32, 8, 128)
    assert spec.rope_scaling_factor == 1.0
    assert spec.derived_max_model_len == 131072


def test_qwen3_explicit_head_dim(model_copy):
    d = model_copy("qwen3-8b")
    spec = load_local_model(d)
    assert spec.head_dim == 128
    _rewrite(d, head_dim=64)
    assert load_local_model(d).head_dim == 64


def test_gemma3_12b_pattern_text_config_and_multimodal(model_copy):
    spec = load_local_model(model_copy("gemma-3-12b-it"))
    assert spec.is_multimodal
    assert spec.model_type == "gemma3_text"
    assert spec.num_hidden_layers == 48 and spec.num_key_value_heads == 8
    # head_dim and vocab omitted in the sparse config: Gemma3TextConfig defaults, with a note
    assert spec.head_dim == 256 and spec.vocab_size == 262208
    assert any("head_dim" in n for n in spec.notes)
    kinds = spec.resolved_layer_types
    full = [i for i, k in enumerate(kinds) if k == FULL_ATTENTION]
    assert full == [5, 11, 17, 23, 29, 35, 41, 47]
    assert kinds[:6] == (SLIDING_ATTENTION,) * 5 + (FULL_ATTENTION,)
    assert spec.sliding_window == 1024
    # linear rope factor 8 is not applied to Gemma 3 (vLLM skips it)
    assert spec.derived_max_model_len == 131072
    assert spec.tie_word_embeddings


def test_gemma3_explicit_pattern(model_copy):
    d = model_copy("gemma-3-12b-it")
    cfg = _config(d)
    cfg["text_config"]["sliding_window_pattern"] = 4
    (d / "config.json").write_text(json.dumps(cfg))
    kinds = load_local_model(d).resolved_layer_types
    assert kinds.count(FULL_ATTENTION) == 12 and kinds[3] == FULL_ATTENTION


def test_gemma2_alternates_even_layers_sliding(model_copy):
    spec = load_local_model(model_copy("gemma-2-9b-it"))
    kinds = spec.resolved_layer_types
    assert kinds[0] == SLIDING_ATTENTION and kinds[1] == FULL_ATTENTION
    assert kinds.count(SLIDING_ATTENTION) == 21 and kinds.count(FULL_ATTENTION) == 21
    assert spec.sliding_window == 4096 and spec.head_dim == 256


def test_gpt_oss_layer_types_window_moe_mxfp4(model_copy):
    spec = load_local_model(model_copy("gpt-oss-20b"))
    kinds = spec.resolved_layer_types
    assert len(kinds) == 24
    assert all(
        k == (SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION) for i, k in enumerate(kinds)
    )
    assert spec.sliding_window == 128
    assert spec.head_dim == 64 and spec.num_key_value_heads == 8
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (32, 4)
    assert spec.quantization == Quantization("mxfp4", 4, 32)
    # yarn: original 4096 x factor 32
    assert spec.derived_max_model_len == 131072
    # no torch_dtype in the config: bf16 assumed and said so
    assert spec.torch_dtype == "bfloat16"
    assert any("torch_dtype" in n for n in spec.notes)


def test_mistral_v01_all_layers_slide(model_copy):
    spec = load_local_model(model_copy("mistral-7b-v0.1"))
    assert spec.resolved_layer_types == (SLIDING_ATTENTION,) * 32
    assert spec.sliding_window == 4096


def test_use_sliding_window_false_wins_over_window(model_copy):
    d = model_copy("qwen2.5-7b-instruct")
    _rewrite(d, sliding_window=4096)
    assert load_local_model(d).sliding_window is None
    _rewrite(d, use_sliding_window=True, max_window_layers=20)
    spec = load_local_model(d)
    assert spec.resolved_layer_types.count(SLIDING_ATTENTION) == 8
    assert spec.resolved_layer_types[20] == SLIDING_ATTENTION


def test_mla_and_deepseek_moe(model_copy):
    spec = load_local_model(model_copy("deepseek-v2-lite"))
    assert spec.mla is not None
    assert (spec.mla.kv_lora_rank, spec.mla.qk_rope_head_dim) == (512, 64)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok) == (64, 6)
    assert spec.moe.num_shared_experts == 2 and spec.moe.moe_intermediate_size == 1408
    assert spec.derived_max_model_len == 4096 * 40


def test_qwen3_moe(model_copy):
    spec = load_local_model(model_copy("qwen3-30b-a3b"))
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.num_experts_per_tok, spec.moe.moe_intermediate_size) == (
        128,
        8,
        768,
    )
    assert (spec.num_key_value_heads, spec.head_dim) == (4, 128)


def test_chatglm_field_names(model_copy):
    spec = load_local_model(model_copy("glm-4-9b-chat"))
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (40, 2, 128)
    assert spec.vocab_size == 151552 and spec.intermediate_size == 13696
    assert spec.derived_max_model_len == 131072


@pytest.mark.parametrize(
    ("rope", "expected"),
    [
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
        ({"type": "linear", "factor": 2.0}, 65536),
        ({"rope_type": "dynamic", "factor": 2.0}, 65536),
        ({"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]}, 32768),
        ({"rope_type": "default"}, 32768),
    ],
)
def test_rope_factor_as_vllm_applies_it(model_copy, rope, expected):
    d = model_copy("qwen2.5-7b-instruct")
    _rewrite(d, rope_scaling=rope)
    assert load_local_model(d).derived_max_model_len == expected


def test_weights_from_single_file(model_copy, st_file):
    d = model_copy("qwen3-8b")
    expected = st_file(
        d / "model.safetensors",
        {"a": ("BF16", [7, 3]), "b": ("F32", [5]), "c": ("I32", [2, 2, 2]), "d": ("U8", [3])},
    )
    assert expected == 7 * 3 * 2 + 5 * 4 + 8 * 4 + 3
    spec = load_local_model(d)
    assert spec.weights_bytes == expected
    assert spec.weights_source == SOURCE_FILE


def test_no_weights_estimated_from_architecture(model_copy):
    spec = load_local_model(model_copy("llama-3.1-8b-instruct"))
    assert spec.weights_source == SOURCE_ESTIMATE
    assert spec.weights_bytes == 16_060_522_496  # 2 bytes x 8,030,261,248 parameters
    assert any("estimated" in n for n in spec.notes)


# --- quantization_config --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("qcfg", "expected"),
    [
        (
            {
                "quant_method": "awq",
                "bits": 4,
                "group_size": 128,
                "zero_point": True,
                "version": "gemm",
            },
            Quantization("awq", 4, 128),
        ),
        (
            {"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False, "sym": True},
            Quantization("gptq", 8, 128),
        ),
        (
            {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]},
            Quantization("fp8", 8, None),
        ),
        ({"quant_method": "mxfp4"}, Quantization("mxfp4", 4, 32)),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
            Quantization("bitsandbytes", 4, None),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "pack-quantized",
                "config_groups": {
                    "group_0": {
                        "targets": ["Linear"],
                        "weights": {
                            "num_bits": 4,
                            "type": "int",
                            "strategy": "group",
                            "group_size": 128,
                        },
                    }
                },
            },
            Quantization("compressed-tensors", 4, 128),
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "format": "float-quantized",
                "config_groups": {
                    "group_0": {
                        "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
                    }
                },
            },
            Quantization("compressed-tensors", 8, None),
        ),
    ],
)
def test_quantization_methods(qcfg, expected):
    assert parse_quantization(qcfg) == expected


def test_quantization_in_config_json(model_copy):
    d = model_copy("qwen2.5-7b-instruct")
    _rewrite(d, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    spec = load_local_model(d)
    assert spec.quantization == Quantization("awq", 4, 128)
    assert not spec.quantization.cli_flag_needed


def test_quantize_config_json_of_autogptq(model_copy):
    d = model_copy("qwen2.5-7b-instruct")
    (d / "quantize_config.json").write_text(
        json.dumps({"bits": 4, "group_size": 128, "desc_act": False})
    )
    assert load_local_model(d).quantization == Quantization("gptq", 4, 128)


def test_quantization_without_method_is_an_error():
    with pytest.raises(ModelSpecError) as err:
        parse_quantization({"group_size": 128}, "x/config.json")
    assert err.value.field == "quantization_config.quant_method"


# --- errors ---------------------------------------------------------------------------------


def test_missing_config(tmp_path):
    with pytest.raises(ModelSpecError) as err:
        load_local_model(tmp_path)
    assert err.value.path == str(tmp_path / "config.json")
    assert "config.json" in str(err.value)


def test_not_a_directory(tmp_path):
    with pytest.raises(ModelSpecError, match="not a directory"):
        load_local_model(tmp_path / "nope")


def test_malformed_config(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"],')
    with pytest.raises(ModelSpecError, match="not valid JSON") as err:
        load_local_model(tmp_path)
    assert err.value.path == str(tmp_path / "config.json")


def test_config_not_an_object(tmp_path):
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelSpecError, match="JSON object"):
        load_local_model(tmp_path)


def test_unknown_architecture_is_estimated_with_the_generic_decoder(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, architectures=["FancyNewForCausalLM"])
    spec = load_local_model(d)
    assert spec.architecture == "FancyNewForCausalLM"
    assert spec.architecture_known is False
    assert any("estimated (unknown architecture)" in n and "FancyNewForCausalLM" in n
               for n in spec.notes)
    # the generic decoder model reads the same widths as for Llama
    assert (spec.num_hidden_layers, spec.num_key_value_heads, spec.head_dim) == (32, 8, 128)


def test_unknown_architecture_without_a_needed_field_is_refused(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, architectures=["FancyNewForCausalLM"], num_attention_heads=None)
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert err.value.field == "num_attention_heads"


def test_missing_architectures(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, architectures=None)
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert err.value.field == "architectures"


@pytest.mark.parametrize(
    "field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"]
)
def test_missing_required_field_is_named(model_copy, field):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, **{field: None})
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert err.value.field == field
    assert f"'{field}'" in str(err.value)
    assert str(d / "config.json") in str(err.value)


def test_missing_max_length(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, max_position_embeddings=None)
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert err.value.field == "max_position_embeddings"


def test_wrong_field_type(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, hidden_size="4096")
    with pytest.raises(ModelSpecError, match="integer") as err:
        load_local_model(d)
    assert err.value.field == "hidden_size"


def test_an_absurd_layer_count_is_refused_before_anything_is_allocated(model_copy):
    d = model_copy("llama-3.1-8b-instruct")
    _rewrite(d, num_hidden_layers=3_291_538_512)  # a fuzzed config once ran out of memory here
    with pytest.raises(ModelSpecError, match="more than any model has") as err:
        load_local_model(d)
    assert str(d / "config.json") in str(err.value)


def test_layer_types_length_mismatch(model_copy):
    d = model_copy("gpt-oss-20b")
    _rewrite(d, layer_types=["full_attention"] * 3)
    with pytest.raises(ModelSpecError) as err:
        load_local_model(d)
    assert err.value.field == "layer_types"


def test_unknown_layer_type(model_copy):
    d = model_copy("gpt-oss-20b")
    _rewrite(d, layer_types=["mystery"] * 24)
    with pytest.raises(ModelSpecError, match="mystery"):
        load_local_model(d)


def test_supported_architectures_cover_catalog_families():
    for arch in ("Qwen2ForCausalLM", "Gemma3ForConditionalGeneration", "GptOssForCausalLM"):
        assert arch in SUPPORTED_ARCHITECTURES


def test_spec_from_config_is_pure():
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 100,
        "max_position_embeddings": 256,
        "model_type": "llama",
    }
    spec = spec_from_config(cfg, model_id="tiny")
    # no num_key_value_heads: multi-head attention, as vLLM assumes
    assert spec.num_key_value_heads == 4 and spec.head_dim == 16
    assert spec.weights_bytes is None


def test_a_modelopt_checkpoint_is_read_by_its_algorithm() -> None:
    """NVIDIA ModelOpt names the format in ``quant_algo``: NVFP4 is vLLM's ``modelopt_fp4``
    (4-bit floats, one scale per 16), FP8 its ``modelopt``."""
    from kvpilot.core.base.model_spec import Quantization
    from kvpilot.core.models.local import parse_quantization

    nvfp4 = parse_quantization({"quant_method": "modelopt", "quant_algo": "NVFP4"})
    assert nvfp4 == Quantization("modelopt_fp4", 4, 16)
    fp8 = parse_quantization({"quant_method": "modelopt", "quant_algo": "FP8"})
    assert fp8 == Quantization("modelopt", 8, None)


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan"), 2.5])
def test_a_size_that_is_no_whole_number_is_named(value: float) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "num_hidden_layers": value}
    with pytest.raises(ModelSpecError, match=r"num_hidden_layers.*expected an integer"):
        spec_from_config(config, model_id="broken/model")
