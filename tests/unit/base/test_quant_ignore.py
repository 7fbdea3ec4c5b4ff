"""``quantization_config.ignore``: parsing, vLLM's two ways of matching it, and the weight bytes
of the modules it keeps unquantized (tests/data/models/*/SOURCE.txt names each config copy)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from fitkit import MODELS

from kvpilot.core.base.model_spec import ModelSpec, Quantization
from kvpilot.core.base.quant_ignore import (
    STYLE_COMPRESSED_TENSORS,
    STYLE_MODELOPT,
    QuantIgnore,
    checkpoint_dtype_bytes,
    ignore_from_config,
    module_prefixes,
)
from kvpilot.core.models.local import config_weight_bytes, spec_from_config

GEMMA4_31B = "gemma-4-31b-it-nvfp4"


def _config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / name / "config.json").read_text())
    return data


def _spec(name: str, config: dict[str, Any] | None = None) -> ModelSpec:
    return spec_from_config(config or _config(name), model_id=name)


def _nvfp4(k: int, n: int) -> int:
    """Bytes of one NVFP4 projection: packed FP4 weights, an FP8 scale per 16, two fp32 scalars."""
    return k * n // 2 + n * k // 16 + 4 + 4


# ---- matching


def test_modelopt_wildcards_reach_the_module_and_its_children_only() -> None:
    ignore = QuantIgnore(("model.language_model.layers.1.self_attn*", "model.vision_tower*",
                          "lm_head"), STYLE_MODELOPT)
    assert ignore.matches("model.language_model.layers.1.self_attn.q_proj")
    assert ignore.matches("model.language_model.layers.1.self_attn")
    assert not ignore.matches("model.language_model.layers.10.self_attn.q_proj")
    assert not ignore.matches("model.language_model.layers.11.self_attn.o_proj")
    assert not ignore.matches("model.language_model.layers.1.mlp.down_proj")
    assert ignore.matches("model.vision_tower.encoder.layers.0.mlp.fc1")
    assert ignore.matches("lm_head")
    # a list entry inside a longer name matches too (vLLM's rule for ModelOpt before 0.39)
    assert ignore.matches("language_model.lm_head")


def test_modelopt_star_inside_a_pattern_spans_dots_but_the_end_is_anchored() -> None:
    ignore = QuantIgnore(("model.layers.*.self_attn",), STYLE_MODELOPT)
    assert ignore.matches("model.layers.17.self_attn")
    # no trailing star: the projections below it are not reached (as in vLLM's fnmatch)
    assert not ignore.matches("model.layers.17.self_attn.k_proj")
    assert QuantIgnore(("model.layers.*.self_attn.*",), STYLE_MODELOPT).matches(
        "model.layers.17.self_attn.k_proj")
    assert not ignore.matches("model.layers.17.mlp.up_proj")


def test_compressed_tensors_matches_exact_names_and_re_patterns_from_the_start() -> None:
    patterns = ("lm_head", "re:.*mlp.gate$", "re:self_attn", "model.layers.2.mlp.down_proj")
    ignore = QuantIgnore(patterns, STYLE_COMPRESSED_TENSORS)
    assert ignore.matches("lm_head")
    assert not ignore.matches("language_model.lm_head")  # no substring rule in this style
    assert ignore.matches("model.layers.3.mlp.gate")
    assert not ignore.matches("model.layers.3.mlp.gate_proj")
    assert not ignore.matches("model.layers.0.self_attn.q_proj")  # re.match anchors at the start
    assert ignore.matches("model.layers.2.mlp.down_proj")
    assert not ignore.matches("model.layers.2.mlp.up_proj")
    # a regular expression Python cannot compile matches nothing instead of failing the plan
    assert not QuantIgnore(("re:(",), STYLE_COMPRESSED_TENSORS).matches("(")


def test_layers_are_counted_under_the_architecture_prefixes() -> None:
    wrapped = QuantIgnore(("language_model.model.layers.3.self_attn*",), STYLE_MODELOPT)
    arch = "Gemma4ForConditionalGeneration"
    assert module_prefixes(arch) == ("model.language_model.", "language_model.model.")
    assert wrapped.ignored_layers(arch, "self_attn.q_proj", tuple(range(60))) == 1
    assert wrapped.ignored_layers("LlamaForCausalLM", "self_attn.q_proj", (3,)) == 0
    nemotron = QuantIgnore(("re:backbone\\.layers\\.[0-4]\\.mixer\\..*",), STYLE_COMPRESSED_TENSORS)
    assert nemotron.ignored_layers("NemotronHForCausalLM", "mixer.in_proj", tuple(range(52))) == 5
    lm_head = QuantIgnore(("lm_head",), STYLE_COMPRESSED_TENSORS)
    assert lm_head.ignored_layers("LlamaForCausalLM", "lm_head", ()) == 1
    assert lm_head.ignored_layers("LlamaForCausalLM", "per_layer_model_projection", ()) == 0


# ---- parsing


def test_the_ignore_list_is_read_for_modelopt_and_compressed_tensors_only() -> None:
    modelopt = ignore_from_config({"quant_method": "modelopt", "quant_algo": "NVFP4",
                                   "ignore": ["lm_head", "model.vision_tower*"]})
    assert modelopt == QuantIgnore(("lm_head", "model.vision_tower*"), STYLE_MODELOPT)
    legacy = ignore_from_config({"quant_method": "modelopt", "quantization": {
        "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}})  # hf_quant_config.json
    assert legacy == QuantIgnore(("lm_head",), STYLE_MODELOPT)
    ct = ignore_from_config({"quant_method": "compressed-tensors", "ignore": ["lm_head"]})
    assert ct == QuantIgnore(("lm_head",), STYLE_COMPRESSED_TENSORS)
    assert ignore_from_config({"quant_method": "compressed-tensors", "ignore": []}) is None
    assert ignore_from_config({"quant_method": "fp8"}) is None
    assert ignore_from_config(None) is None
    assert checkpoint_dtype_bytes("torch.float32") == 4 and checkpoint_dtype_bytes("bf16") == 2


def test_the_gemma4_nvfp4_fixture_carries_its_ignore_list() -> None:
    quant = _spec(GEMMA4_31B).quantization
    assert quant is not None and quant.method == "modelopt_fp4"
    assert quant.ignore is not None and quant.ignore.style == STYLE_MODELOPT
    assert len(quant.ignore.patterns) == 63  # lm_head, embed_vision, 60 x self_attn, vision
    assert replace(quant, ignore=None) == Quantization("modelopt_fp4", 4, 16)


# ---- weight bytes


def test_gemma4_31b_nvfp4_keeps_its_attention_in_bf16() -> None:
    """Every layer's self_attn is in the fixture's ignore list, so the 8.48 B attention
    parameters are stored in bf16 and only the MLP projections in NVFP4."""
    config = _config(GEMMA4_31B)
    spec = _spec(GEMMA4_31B)
    assert spec.quantization is not None
    after = config_weight_bytes(spec, config)
    all_quantized = config_weight_bytes(spec, config, replace(spec.quantization, ignore=None))
    h = 5376
    sliding = [(h, 32 * 256), (h, 16 * 256), (h, 16 * 256), (32 * 256, h)]  # q, k, v, o
    full = [(h, 32 * 512), (h, 4 * 512), (32 * 512, h)]  # q, k (= v), o
    attention = [(k, n, 50) for k, n in sliding] + [(k, n, 10) for k, n in full]
    assert sum(k * n * c for k, n, c in attention) == 8_477_736_960
    extra = sum((2 * k * n - _nvfp4(k, n)) * c for k, n, c in attention)
    assert after - all_quantized == extra
    assert all_quantized == 20_446_499_912  # every projection NVFP4 (19.04 GiB)
    assert after == 32_633_244_952  # attention bf16 (30.39 GiB); 22,276,917,112 before both fixes


def test_gemma4_31b_as_vllm_loads_it_against_a_published_gpu_memory_figure() -> None:
    """The LilaRest/gemma-4-31B-it-NVFP4-turbo model card (its README on the Hub, commit
    ed0e4c7) gives the GPU memory vLLM holds for nvidia/Gemma-4-31B-IT-NVFP4, 31 GiB, and for
    google/gemma-4-31B-it, 58.9 GiB. The plan's weights (checkpoint bytes and the RoPE tables,
    :mod:`kvpilot.core.models.rope_cache`) land within 1 % of both (30.77 and 58.62 GiB); with
    every projection priced NVFP4 they were 21.1 GiB (-32 %)."""
    GiB = 2**30
    config = _config(GEMMA4_31B)
    spec = _spec(GEMMA4_31B)
    nvfp4 = config_weight_bytes(spec, config) + spec.rope_cache_bytes
    assert abs(nvfp4 / (31 * GiB) - 1) < 0.01
    bf16_config = {k: v for k, v in config.items() if k != "quantization_config"}
    bf16 = spec_from_config(bf16_config, model_id="google/gemma-4-31B-it")
    bf16_bytes = config_weight_bytes(bf16, bf16_config) + bf16.rope_cache_bytes
    assert abs(bf16_bytes / (58.9 * GiB) - 1) < 0.01


def test_nvfp4_scales_are_one_fp8_byte_per_16_weights_and_two_fp32_scalars() -> None:
    spec = _spec("llama-3.1-8b-instruct")
    config = _config("llama-3.1-8b-instruct")
    bf16 = config_weight_bytes(spec, config)
    nvfp4 = config_weight_bytes(spec, config, Quantization("modelopt_fp4", 4, 16))
    h, kv, inter, layers = 4096, 8 * 128, 14336, 32
    shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, inter), (h, inter), (inter, h)]
    saved = sum(2 * k * n - _nvfp4(k, n) for k, n in shapes) * layers
    assert bf16 - nvfp4 == saved


@pytest.mark.parametrize(("name", "quant", "expected"), [
    ("deepseek-v3", None, 672_987_559_744),  # fp8, no ignore list
    ("gpt-oss-20b", None, 13_761_264_768),  # mxfp4 (modules_to_not_convert is not read)
    ("llama-3.1-8b-instruct", Quantization("awq", 4, 128), 5_727_854_592),
    ("qwen3-30b-a3b", Quantization("compressed-tensors", 4, 128), 16_685_887_488),
    ("nemotron-3-nano-30b-a3b", Quantization("fp8", 8, None), 32_291_495_456),
])
def test_a_checkpoint_without_an_ignore_list_is_priced_as_before(
    name: str, quant: Quantization | None, expected: int
) -> None:
    """The figures of the byte model before ignore lists were read (same fixtures)."""
    spec = _spec(name)
    assert spec.quantization is None or spec.quantization.ignore is None
    assert config_weight_bytes(spec, _config(name), quant) == expected


def test_an_fp8_compressed_tensors_ignore_list_keeps_those_modules_in_bf16() -> None:
    """FP8 per-tensor weights (compressed-tensors ``float-quantized``) with the attention of
    every layer, one down projection and the lm_head left out."""
    base = _config("llama-3.1-8b-instruct")
    qcfg = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
            "input_activations": {"num_bits": 8, "type": "float", "strategy": "tensor"},
        }},
        "ignore": ["lm_head", "re:.*self_attn\\..*", "model.layers.31.mlp.down_proj"],
    }
    spec = _spec("llama-3.1-8b-instruct", {**base, "quantization_config": qcfg})
    quant = spec.quantization
    assert quant is not None and quant.ignore is not None
    assert quant.ignore.style == STYLE_COMPRESSED_TENSORS
    plain = config_weight_bytes(spec, base, replace(quant, ignore=None))
    assert plain == 9_081_202_432  # every projection FP8, as before
    h, kv, inter = 4096, 8 * 128, 14336

    def fp8(k: int, n: int) -> int:
        return k * n + 4 + 4  # weight, per-tensor weight scale, static input scale

    attention = [(h, h), (h, kv), (h, kv), (h, h)]
    extra = sum(2 * k * n - fp8(k, n) for k, n in attention) * 32
    extra += 2 * inter * h - fp8(inter, h)
    assert config_weight_bytes(spec, base) - plain == extra


def test_a_compressed_tensors_nvfp4_checkpoint_is_priced_as_modelopt_nvfp4() -> None:
    """compressed-tensors' NVFP4 layout (``tensor_group`` strategy, FP4 in groups of 16) loads
    the same tensors as ModelOpt's: packed weights, FP8 group scales, two fp32 scalars."""
    base = _config("qwen3-8b")
    qcfg = {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                        "group_size": 16},
            "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                  "group_size": 16, "dynamic": "local"},
        }},
        "ignore": ["lm_head"],
    }
    spec = _spec("qwen3-8b", {**base, "quantization_config": qcfg})
    assert spec.quantization is not None
    assert replace(spec.quantization, ignore=None) == Quantization("compressed-tensors", 4, 16)
    modelopt = config_weight_bytes(spec, base, Quantization("modelopt_fp4", 4, 16))
    assert config_weight_bytes(spec, base) == modelopt == 6_396_932_064
