"""Weight bytes of a checkpoint computed from its architecture, per quantization method.

Used where no weight file has been seen (catalog checkpoints without a published size, a model
directory holding only ``config.json``). The figures are estimates and are always labelled
``SOURCE_ESTIMATE`` by the callers.

The byte model, per linear layer of ``in_features`` x ``out_features`` with group size ``g``:

* 16-bit (``None``): 2 bytes per parameter.
* ``awq`` (GEMM layout): packed int4/int8 ``qweight`` = in x out x bits / 8, int32-packed
  ``qzeros`` = (in / g) x out x bits / 8, fp16 ``scales`` = (in / g) x out x 2.
* ``gptq``: as ``awq`` plus an int32 ``g_idx`` of in x 4 bytes.
* ``compressed-tensors`` / ``bitsandbytes`` with 4 bits: as ``awq`` without zero points (symmetric),
  with 8 bits: 1 byte per weight plus one 16-bit scale per output channel.
* ``fp8``: 1 byte per weight plus one fp32 scale per 128 x 128 block (``weight_block_size``) or per
  tensor.
* ``mxfp4``: expert weights at 4 bits plus one 8-bit scale per 32 values (4.25 bits); everything
  else 16-bit.
* ``modelopt_fp4`` (NVFP4, vLLM's ``ModelOptNvFp4LinearMethod``): two FP4 values per byte, one
  FP8 block scale per 16 weights of a row, and two fp32 scalars per projection (the weight's
  global scale ``weight_scale_2`` and the static ``input_scale``): 4.5 bits per weight. The
  same for ``compressed-tensors`` with 4 bits in groups of 16 (its NVFP4 layout,
  ``tensor_group`` strategy; :mod:`.checkpoint_rules` reads 4 bits / 16 as NVFP4 too).

The projections a checkpoint's ``quantization_config.ignore`` names (:mod:`.quant_ignore`; e.g.
the attention of every layer of nvidia/Gemma-4-31B-IT-NVFP4) are stored unquantized, in the
checkpoint dtype.

Embeddings, the lm_head, norms and biases stay 16-bit in every method; only the attention and MLP
(or expert) projections are quantized. On the published checkpoints whose sizes are known this
model agrees within 0.03 % (AWQ Llama-3.1-8B, Mistral-Nemo, Qwen2.5-7B/32B; FP8 Llama-3.1-8B).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from math import ceil
from typing import Any

from kvpilot.core.base.model_spec import ModelSpec, Quantization
from kvpilot.core.base.quant_ignore import checkpoint_dtype_bytes
from kvpilot.core.base.quant_mixed import ALGO_FP8, NVFP4_ALGOS, MixedPrecision
from kvpilot.core.models.bytemodel_hybrid import hybrid_breakdown  # rules of 2026 models
from kvpilot.core.models.checkpoint_rules import NVFP4_GROUP_SIZE
from kvpilot.core.models.params import Linear, ParamBreakdown, named_linears

__all__ = ["Linear", "ParamBreakdown", "estimate_weight_bytes", "param_breakdown"]

#: model types whose q/k/v projections carry a bias
_QKV_BIAS_TYPES = frozenset(
    {"qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text", "chatglm"}
)
#: model types with RMS norms on q and k (one vector of head_dim each per layer)
_QK_NORM_TYPES = frozenset(
    {"qwen3", "qwen3_moe", "qwen3_vl_text", "qwen3_vl_moe_text", "gemma3", "gemma3_text"}
)
#: model types with four norms per decoder layer instead of two
_FOUR_NORM_TYPES = frozenset({"gemma2", "gemma3", "gemma3_text"})
#: checkpoint names of the gate / up / down projections of expert 0 (an ignore list is matched
#: against the first expert of each layer: the lists name whole blocks, never one expert)
_EXPERT_NAMES: dict[str, tuple[str, str, str]] = {
    "": ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mlp.experts.0.down_proj"),
    "mixtral": ("block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w3",
                "block_sparse_moe.experts.0.w2"),
    "gpt_oss": ("mlp.experts.gate_up_proj", "mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
}


def param_breakdown(
    spec: ModelSpec, text_config: Mapping[str, Any] | None = None
) -> ParamBreakdown:
    """Split the text model's parameters into quantizable projections and 16-bit rest.

    ``text_config`` (the raw config of the text model) supplies small flags that the spec does not
    carry (``attention_bias``, ``add_qkv_bias``, ``first_k_dense_replace``, ``q_lora_rank``...).
    Vision encoders are not counted.
    """
    cfg: Mapping[str, Any] = text_config or {}
    special = hybrid_breakdown(spec, cfg)
    if special is not None:
        return special
    mt = spec.model_type
    h = spec.hidden_size
    n_layers = spec.num_hidden_layers
    nh, nkv, hd = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    linears: list[Linear] = []
    dense = 0
    every = tuple(range(n_layers))

    def add(k: int, n: int, *names: str, layers: tuple[int, ...] = every, per: int = 1,
            is_expert: bool = False) -> None:
        linears.extend(named_linears(k, n, names, layers, per, is_expert))

    all_bias = bool(cfg.get("attention_bias", False)) or mt == "gpt_oss"
    qkv_bias = all_bias or mt in _QKV_BIAS_TYPES or bool(cfg.get("add_qkv_bias", False))

    # attention
    if spec.mla is not None:
        nope = int(cfg.get("qk_nope_head_dim") or 0)
        rope = spec.mla.qk_rope_head_dim
        v_hd = int(cfg.get("v_head_dim") or nope)
        q_lora = cfg.get("q_lora_rank")
        if q_lora:
            add(h, int(q_lora), "self_attn.q_a_proj")
            add(int(q_lora), nh * (nope + rope), "self_attn.q_b_proj")
            dense += int(q_lora) * n_layers
        else:
            add(h, nh * (nope + rope), "self_attn.q_proj")
        add(h, spec.mla.kv_lora_rank + rope, "self_attn.kv_a_proj_with_mqa")
        add(spec.mla.kv_lora_rank, nh * (nope + v_hd), "self_attn.kv_b_proj")
        add(nh * v_hd, h, "self_attn.o_proj")
        dense += spec.mla.kv_lora_rank * n_layers
    else:
        add(h, nh * hd, "self_attn.q_proj")
        add(h, nkv * hd, "self_attn.k_proj", "self_attn.v_proj")
        add(nh * hd, h, "self_attn.o_proj")
        if qkv_bias:
            dense += (nh * hd + 2 * nkv * hd) * n_layers
        if all_bias:
            dense += h * n_layers
    if mt in _QK_NORM_TYPES:
        dense += 2 * hd * n_layers
    if mt == "gpt_oss":
        dense += nh * n_layers  # attention sinks

    # feed-forward
    moe = spec.moe
    if moe is None:
        inter = spec.intermediate_size or 0
        add(h, inter, "mlp.gate_proj", "mlp.up_proj")
        add(inter, h, "mlp.down_proj")
    else:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        moe_layers = n_layers - first_dense
        inter = spec.intermediate_size or 0
        if first_dense:
            add(h, inter, "mlp.gate_proj", "mlp.up_proj", layers=every[:first_dense])
            add(inter, h, "mlp.down_proj", layers=every[:first_dense])
        e_inter = moe.moe_intermediate_size or inter
        e = moe.num_experts
        gate, up, down = _EXPERT_NAMES.get(mt, _EXPERT_NAMES[""])
        add(h, e_inter, gate, up, layers=every[first_dense:], per=e, is_expert=True)
        add(e_inter, h, down, layers=every[first_dense:], per=e, is_expert=True)
        dense += h * e * moe_layers  # router
        if mt == "gpt_oss":
            dense += (e + e * 2 * e_inter + e * h) * moe_layers  # router and expert biases
        if moe.num_shared_experts:
            s_inter = e_inter * moe.num_shared_experts
            shared = "mlp.shared_experts" if spec.mla is not None else "mlp.shared_expert"
            add(h, s_inter, f"{shared}.gate_proj", f"{shared}.up_proj",
                layers=every[first_dense:])
            add(s_inter, h, f"{shared}.down_proj", layers=every[first_dense:])

    norms_per_layer = 4 if mt in _FOUR_NORM_TYPES else 2
    dense += norms_per_layer * h * n_layers + h
    embedding = spec.vocab_size * h
    lm_head = 0 if spec.tie_word_embeddings else spec.vocab_size * h
    dense += embedding + lm_head
    return ParamBreakdown(tuple(linears), dense, embedding, lm_head)


def _linear_bytes(lin: Linear, quant: Quantization | None, fp8_block: int | None) -> int:
    n, k = lin.out_features, lin.in_features
    weights = k * n
    if quant is None:
        return 2 * weights * lin.count
    method = quant.method
    bits = quant.bits or 16
    group = quant.group_size if quant.group_size and quant.group_size > 0 else k
    groups = ceil(k / group)
    if method == "modelopt_fp4" or (method == "compressed-tensors" and bits == 4
                                    and quant.group_size == NVFP4_GROUP_SIZE):
        return (weights // 2 + n * groups + 4 + 4) * lin.count
    if method == "mxfp4":
        if not lin.is_expert:
            return 2 * weights * lin.count
        return (weights // 2 + ceil(weights / 32)) * lin.count
    if method == "fp8" or (
        method == "compressed-tensors" and bits == 8 and quant.group_size is None
    ):
        # fp32 scale per block, or a per-tensor weight scale + static input scale
        scales = ceil(n / fp8_block) * ceil(k / fp8_block) * 4 if fp8_block else 4 + 4
        return (weights + scales) * lin.count
    if method in ("awq", "gptq"):
        per = weights * bits // 8 + groups * n * bits // 8 + groups * n * 2
        if method == "gptq":
            per += 4 * k
        return per * lin.count
    if bits >= 16:
        return 2 * weights * lin.count
    if bits == 8:
        return (weights + 2 * n) * lin.count
    return (weights * bits // 8 + groups * n * 2) * lin.count


def estimate_weight_bytes(
    spec: ModelSpec,
    quantization: Quantization | None = None,
    text_config: Mapping[str, Any] | None = None,
    *,
    fp8_block: int | None = None,
) -> int:
    """Bytes of all weight tensors of ``spec`` stored with ``quantization`` (None = 16-bit).

    ``fp8_block`` is the FP8 block edge (``weight_block_size``, 128 for Qwen's FP8 checkpoints);
    None means per-tensor scales. Raises nothing; unknown methods fall back to the generic
    ``bits`` rule of the module docstring. Projections named in ``quantization.ignore`` are
    priced at ``spec.torch_dtype``.
    """
    breakdown = param_breakdown(spec, text_config)
    total = 2 * breakdown.dense16_params
    ignore = quantization.ignore if quantization is not None else None
    elem = checkpoint_dtype_bytes(spec.torch_dtype)
    if quantization is not None and quantization.mixed is not None:
        return total + _mixed_bytes(spec, breakdown, quantization.mixed, elem)
    for lin in breakdown.linears:
        kept = 0  # projections the checkpoint leaves unquantized
        if ignore is not None and lin.name:
            per_layer = lin.count // len(lin.layers) if lin.layers else lin.count
            kept = min(lin.count,
                       ignore.ignored_layers(spec.architecture, lin.name, lin.layers) * per_layer)
        if kept:
            total += elem * lin.in_features * lin.out_features * kept
            lin = replace(lin, count=lin.count - kept)
        total += _linear_bytes(lin, quantization, fp8_block)
    return total


#: the formats of a mixed checkpoint's modules, priced as vLLM loads them (per-tensor FP8 with
#: its two fp32 scales; NVFP4 packed with its FP8 group scales)
_MIXED_FORMATS = {ALGO_FP8: Quantization("fp8", 8)} | {
    algo: Quantization("modelopt_fp4", 4, NVFP4_GROUP_SIZE) for algo in NVFP4_ALGOS}


def _mixed_bytes(spec: ModelSpec, breakdown: ParamBreakdown, mixed: MixedPrecision,
                 elem: int) -> int:
    """Bytes of the projections (and a quantized lm_head) of a MIXED_PRECISION checkpoint,
    each in its listed format; modules it does not list stay in the checkpoint dtype."""
    total = 0
    for lin in breakdown.linears:
        layers: tuple[int | None, ...] = lin.layers or (None,)
        per_layer = lin.count // len(layers)
        for layer in layers:
            algo = mixed.algo_of(spec.architecture, lin.name, layer) if lin.name else None
            unit = replace(lin, count=per_layer)
            fmt = _MIXED_FORMATS.get(algo or "")
            total += (_linear_bytes(unit, fmt, None) if fmt is not None
                      else elem * lin.in_features * lin.out_features * per_layer)
    head = _MIXED_FORMATS.get(mixed.algo_of(spec.architecture, "lm_head", None) or "")
    if head is not None and breakdown.lm_head_params:
        total -= 2 * breakdown.lm_head_params  # counted 16-bit with the dense parameters
        total += _linear_bytes(Linear(spec.hidden_size, spec.vocab_size, 1), head, None)
    return total

