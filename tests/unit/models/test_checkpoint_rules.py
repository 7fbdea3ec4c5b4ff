"""Weight schemes from real quantization configs, and which cards run them."""

from __future__ import annotations

from kvpilot.core.base.model_spec import Quantization
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.fit.support import check_support
from kvpilot.core.hardware.target import from_spec
from kvpilot.core.models import catalog
from kvpilot.core.models.checkpoint_rules import (
    SCHEME_16BIT,
    SCHEME_AWQ,
    SCHEME_FP8,
    SCHEME_GPTQ,
    SCHEME_MXFP4,
    SCHEME_NVFP4,
    SCHEME_W4A16,
    SCHEME_W8A8_INT8,
    caveat,
    refusal,
    scheme_of,
    scheme_of_quantization,
)


def test_schemes_of_real_quantization_configs():
    # the configs as published (reference/quantized.json: Qwen AWQ/GPTQ/FP8, gpt-oss MXFP4)
    assert scheme_of({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                      "version": "gemm"}) == SCHEME_AWQ
    assert scheme_of({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                      "sym": True}) == SCHEME_GPTQ
    assert scheme_of({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                      "activation_scheme": "dynamic"}) == SCHEME_FP8
    assert scheme_of({"quant_method": "mxfp4"}) == SCHEME_MXFP4
    assert scheme_of(None) == SCHEME_16BIT
    # compressed-tensors: 4-bit int weights with no activation scheme, and NVFP4's format
    w4a16 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}
    assert scheme_of(w4a16) == SCHEME_W4A16
    nvfp4 = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float",
                                                       "group_size": 16}}}}
    assert scheme_of(nvfp4) == SCHEME_NVFP4
    # INT8 W8A8 (reference/quantized.json, neuralmagic/DeepSeek-R1-Distill-Llama-8B-quantized.w8a8
    # config.json: int8 per-channel weights, int8 per-token dynamic activations)
    w8a8 = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True},
    }}}
    assert scheme_of(w8a8) == SCHEME_W8A8_INT8
    assert scheme_of({"quant_method": "modelopt", "quant_algo": "NVFP4"}) == SCHEME_NVFP4
    assert scheme_of_quantization(Quantization("compressed-tensors", 4, 16)) == SCHEME_NVFP4
    assert scheme_of_quantization(Quantization("compressed-tensors", 4, 128)) == SCHEME_W4A16


def test_nvfp4_runs_on_blackwell_and_through_marlin_on_the_releases_that_have_it():
    """FP4 tensor cores on sm_100/sm_120; elsewhere vLLM's Marlin FP4 kernel from 0.10 on sm_80+
    and from 0.20 on sm_75+ (ModelOptNvFp4Config.get_min_capability in those wheels)."""
    ada = from_spec("RTX 4090", "linux").compute_capability
    blackwell = from_spec("RTX 5090", "linux").compute_capability
    assert refusal(SCHEME_NVFP4, blackwell) is None
    assert refusal(SCHEME_NVFP4, blackwell, "0.9.2") is None
    for version in (None, "0.10.0", "0.28.0"):
        assert refusal(SCHEME_NVFP4, ada, version) is None
        assert "Marlin FP4 kernel (weight-only" in caveat(SCHEME_NVFP4, ada, version)
    assert caveat(SCHEME_NVFP4, blackwell) == ""
    why = refusal(SCHEME_NVFP4, ada, "0.9.2")
    assert why is not None and "sm_100 or sm_120" in why and "sm_89 with vLLM 0.9.2" in why
    assert refusal(SCHEME_NVFP4, (7, 5), "0.11.0") is not None  # Turing from 0.20 only
    assert refusal(SCHEME_NVFP4, (7, 5), "0.20.0") is None
    assert refusal(SCHEME_AWQ, (8, 6)) is None
    assert refusal(SCHEME_AWQ, (7, 0)) is not None


def test_fp8_below_ada_runs_weight_only_with_a_caveat():
    assert refusal(SCHEME_FP8, (8, 6)) is None
    assert "weight-only" in caveat(SCHEME_FP8, (8, 6))
    assert caveat(SCHEME_FP8, (8, 9)) == ""


def test_the_planner_refuses_an_nvfp4_checkpoint_only_where_vllm_cannot_run_it():
    base = catalog.get("Qwen/Qwen3-8B")
    from dataclasses import replace

    fp4 = replace(base, quantization=Quantization("compressed-tensors", 4, 16))
    ada = from_spec("RTX 4090", "linux")
    assert check_support(PlanInputs.on_gpu(fp4, ada)) is None  # Marlin FP4 on vLLM 0.33
    old = PlanInputs.on_gpu(fp4, ada, vllm_version="0.9.2")
    failure = check_support(old)
    assert failure is not None and "NVFP4" in failure.message
    assert check_support(PlanInputs.on_gpu(fp4, from_spec("RTX 5090", "linux"))) is None
