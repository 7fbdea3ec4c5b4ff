"""ModelOpt MIXED_PRECISION checkpoints (kvpilot.core.base.quant_mixed), from the real
config.json of nvidia/Qwen3.6-27B-NVFP4 (tests/data/models/qwen3.6-27b-nvfp4/SOURCE.txt): the
MLP and lm_head in W4A16 NVFP4, the attention and linear-attention projections in FP8."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from fitkit import MODELS

from kvpilot.core.base.quant_mixed import mixed_from_config
from kvpilot.core.models.checkpoint_rules import SCHEME_NVFP4, scheme_of, scheme_of_quantization
from kvpilot.core.models.local import load_local_model

NAME = "qwen3.6-27b-nvfp4"
PREFIX = "model.language_model."


def _config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MODELS / NAME / "config.json").read_text())
    return data


def _weights(config: dict[str, Any], tmp_path: Path, tag: str) -> int:
    root = tmp_path / tag
    root.mkdir()
    (root / "config.json").write_text(json.dumps(config))
    size = load_local_model(root).weights_bytes
    assert size is not None
    return size


def _nvfp4(k: int, n: int) -> int:
    """vLLM's NVFP4 tensors of one k x n projection: packed FP4, an FP8 scale per 16, 2 fp32."""
    return k * n // 2 + n * (k // 16) + 8


def test_each_module_gets_its_listed_algorithm() -> None:
    cfg = _config()
    mixed = mixed_from_config(cfg["quantization_config"])
    assert mixed is not None and len(mixed.layers) == 401
    assert mixed.algorithms == {"FP8", "W4A16_NVFP4"}
    arch = cfg["architectures"][0]
    assert mixed.algo_of(arch, "mlp.gate_proj", 0) == "W4A16_NVFP4"
    assert mixed.algo_of(arch, "self_attn.q_proj", 3) == "FP8"  # layer 3 is a full one
    assert mixed.algo_of(arch, "self_attn.q_proj", 0) is None  # layer 0 is linear attention
    # kvpilot's fused projection through the checkpoint's shards (in_proj_qkv + in_proj_z)
    assert mixed.algo_of(arch, "linear_attn.in_proj_qkvz", 0) == "FP8"
    assert mixed.algo_of(arch, "linear_attn.in_proj_ba", 0) is None  # kept in bf16
    assert mixed.algo_of(arch, "lm_head", None) == "W4A16_NVFP4"
    # a mixed checkpoint with NVFP4 layers is an NVFP4 checkpoint for the card rules
    assert scheme_of(cfg["quantization_config"]) == SCHEME_NVFP4
    spec = load_local_model(MODELS / NAME)
    assert scheme_of_quantization(spec.quantization) == SCHEME_NVFP4
    assert mixed_from_config({"quant_method": "modelopt", "quant_algo": "NVFP4"}) is None


def test_the_size_follows_each_modules_format(tmp_path: Path) -> None:
    cfg = _config()
    text = cfg["text_config"]
    h, inter, vocab = text["hidden_size"], text["intermediate_size"], text["vocab_size"]
    mixed_size = _weights(cfg, tmp_path, "mixed")
    # 27 B parameters stored mostly in 4.5 and 8 bits: about 19.6 GiB (51 GiB in bf16)
    assert 18 * 2**30 < mixed_size < 21 * 2**30
    # one layer's MLP left out of quantized_layers comes back to bf16, to the byte
    fewer = copy.deepcopy(cfg)
    for proj in ("gate_proj", "up_proj", "down_proj"):
        del fewer["quantization_config"]["quantized_layers"][f"{PREFIX}layers.5.mlp.{proj}"]
    mlp = [(h, inter), (h, inter), (inter, h)]
    extra = sum(2 * k * n - _nvfp4(k, n) for k, n in mlp)
    assert _weights(fewer, tmp_path, "fewer") - mixed_size == extra
    # the quantized lm_head in NVFP4 instead of bf16
    bf16_head = copy.deepcopy(cfg)
    del bf16_head["quantization_config"]["quantized_layers"]["lm_head"]
    assert _weights(bf16_head, tmp_path, "head") - mixed_size == 2 * h * vocab - _nvfp4(h, vocab)
