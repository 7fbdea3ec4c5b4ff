"""The bytes vLLM's MXFP4 MoE kernels add to a checkpoint's expert weights when it loads them.

vLLM creates the expert tensors of an MXFP4 checkpoint (gpt-oss) with the hidden and the
per-rank intermediate size rounded up to what the selected kernel needs, and loads the
checkpoint into them (``mxfp4.py`` ``create_weights`` in 0.10.2; ``fused_moe/oracle/mxfp4.py``
``mxfp4_round_up_hidden_size_and_intermediate_size`` in 0.2x):

* Marlin (CUDA GPUs below SM 9.0 and SM 12.x: A100, RTX 30/40/50): intermediate to a multiple of
  128, hidden to a multiple of 256;
* FlashInfer TRT-LLM (SM 10.x): both to multiples of 256;
* Triton (SM 9.x): intermediate to a multiple of 64, hidden unchanged.

gpt-oss (hidden 2880, intermediate 2880) thus loads about 9 % more expert bytes on an RTX 4090
than its files hold; on four A100s (720 per rank, padded to 768) 13 % more, which is what vLLM
0.10.1.1 logged there (17.22 GiB per rank for a 60.8 GiB checkpoint). Sizes are bytes.
"""

from __future__ import annotations

import math

from kvpilot.core.base.model_spec import ModelSpec

#: bytes per MXFP4 weight: 4 bits plus one 8-bit scale per 32 values
_BYTES_PER_WEIGHT = 0.5 + 1 / 32


def _round_up(value: int, multiple: int) -> int:
    return math.ceil(value / multiple) * multiple


def kernel_multiples(compute_capability: tuple[int, int] | None) -> tuple[int, int] | None:
    """(hidden multiple, intermediate multiple) of the MXFP4 MoE kernel vLLM picks on a GPU of
    ``compute_capability`` (None: GPU unknown)."""
    if compute_capability is None:
        return None
    major = compute_capability[0]
    if major == 9:
        return 1, 64  # Triton kernels
    if major == 10:
        return 256, 256  # FlashInfer TRT-LLM
    return 256, 128  # Marlin


def padding_bytes(
    model: ModelSpec, tensor_parallel_size: int, compute_capability: tuple[int, int] | None
) -> int:
    """Bytes per rank that vLLM's padding adds to the expert weights of an MXFP4 checkpoint
    (0 for other checkpoints, dense models or an unknown GPU)."""
    quant = model.quantization
    moe = model.moe
    multiples = kernel_multiples(compute_capability)
    if quant is None or quant.method != "mxfp4" or moe is None or multiples is None:
        return 0
    h = model.hidden_size
    inter = (moe.moe_intermediate_size or model.intermediate_size or 0) // max(
        1, tensor_parallel_size)
    if h <= 0 or inter <= 0:
        return 0
    h_pad, i_pad = _round_up(h, multiples[0]), _round_up(inter, multiples[1])
    per_expert = (2 * i_pad * h_pad + h_pad * i_pad) - (2 * inter * h + h * inter)
    bias = (2 * i_pad + h_pad) - (2 * inter + h)  # 16-bit biases of gpt-oss's experts
    layers = model.num_hidden_layers
    weights = per_expert * moe.num_experts * layers * _BYTES_PER_WEIGHT
    return int(weights + bias * moe.num_experts * layers * 2)
