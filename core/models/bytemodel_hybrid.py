"""Parameters of the 2026 text architectures, split the way :mod:`.bytemodel` prices them.

Each rule follows the tensors vLLM's model file loads (vLLM 0.2x ``model_executor/models``):

* ``qwen3_next`` / ``qwen3_5_text`` / ``qwen3_5_moe_text``: Gated DeltaNet layers
  (``in_proj_qkvz`` = hidden -> 2 x key heads x key dim + 2 x value heads x value dim,
  ``in_proj_ba`` = hidden -> 2 x value heads, ``out_proj``, a depthwise conv of ``kernel`` taps
  over the conv channels, ``A_log``, ``dt_bias`` and a gated norm of one value head); every
  fourth layer full attention with an output gate (``q_proj`` twice as wide) and q/k norms;
  dense MLP or experts plus a shared expert and its 1-wide gate. The MTP block
  (``mtp_num_hidden_layers``) is not loaded without speculative decoding and is not counted.
* ``nemotron_h`` / ``granitemoehybrid``: Mamba2 mixers (``in_proj`` = hidden -> 2 x inner +
  2 x groups x state + heads, conv with bias, ``A_log``, ``D``, ``dt_bias``, a norm of the inner
  width, ``out_proj``); attention layers; Nemotron-H's ``-`` layers an ungated MLP and ``E``
  layers ungated experts, a shared expert and a router with its correction bias, one norm per
  layer. Granite 4 puts a gated MLP (or experts plus a shared MLP) after every mixer.
* ``gemma4_text``: sliding layers of ``head_dim``, full layers of ``global_head_dim`` with
  ``num_global_key_value_heads`` and no ``v_proj`` where ``attention_k_eq_v``; q/k norms, four
  norms and a layer scalar per layer; the MoE block (router with scale and per-expert scale,
  fused gate/up experts, three extra norms) beside the dense MLP; per-layer embeddings
  (``vocab_size_per_layer_input`` x layers x ``hidden_size_per_layer_input``, their model
  projection and norm, each layer's gate, projection and norm); double-wide MLPs on KV-shared
  layers (``use_double_wide_mlp``).
* ``llama4_text``: experts on every ``interleave_moe_layer_step``-th layer with a shared expert
  of ``intermediate_size``, dense ``intermediate_size_mlp`` layers otherwise.

Vision and audio towers are counted by the callers (:mod:`.vision`, :func:`tower_params`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    ModelSpec,
)
from kvpilot.core.models.params import Linear, ParamBreakdown, named_linears

_GDN_TYPES = frozenset({"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe"})
_MAMBA_TYPES = frozenset({"nemotron_h", "granitemoehybrid"})


def _int(cfg: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def hybrid_breakdown(spec: ModelSpec, cfg: Mapping[str, Any]) -> ParamBreakdown | None:
    """The split for a 2026 architecture, or None for the generic rules of :mod:`.bytemodel`."""
    mt = spec.model_type
    if mt in _GDN_TYPES or mt in _MAMBA_TYPES or mt == "gemma4_text" or mt == "llama4_text":
        return _breakdown(spec, cfg)
    return None


def _attention(spec: ModelSpec, cfg: Mapping[str, Any], kind: str, layers: tuple[int, ...],
               linears: list[Linear]) -> int:
    """Append the projections of the attention layers ``layers`` of ``kind``; return 16-bit
    params."""
    count = len(layers)
    h, nh = spec.hidden_size, spec.num_attention_heads
    hd, nkv = spec.head_dim, spec.num_key_value_heads
    k_eq_v = False
    if kind == FULL_ATTENTION and spec.model_type == "gemma4_text":
        hd = spec.global_head_dim or hd
        k_eq_v = bool(cfg.get("attention_k_eq_v"))
        if k_eq_v:
            nkv = _int(cfg, "num_global_key_value_heads", default=nkv) or nkv
    if count <= 0:
        return 0
    gate = 2 if cfg.get("attn_output_gate") or spec.model_type == "qwen3_next" else 1
    at = "mixer" if spec.model_type == "nemotron_h" else "self_attn"
    linears += named_linears(h, nh * hd * gate, (f"{at}.q_proj",), layers)
    kv = (f"{at}.k_proj",) if k_eq_v else (f"{at}.k_proj", f"{at}.v_proj")
    linears += named_linears(h, nkv * hd, kv, layers)
    linears += named_linears(nh * hd, h, (f"{at}.o_proj",), layers)
    dense = 0
    if spec.model_type in _GDN_TYPES or spec.model_type == "gemma4_text":
        dense += 2 * hd * count  # q / k norms
    if cfg.get("attention_bias"):
        dense += (nh * hd + 2 * nkv * hd + h) * count
    return dense


def _breakdown(spec: ModelSpec, cfg: Mapping[str, Any]) -> ParamBreakdown:
    mt = spec.model_type
    h = spec.hidden_size
    kinds = spec.resolved_layer_types
    n_layers = len(kinds)
    linears: list[Linear] = []
    dense = 0
    every = tuple(range(n_layers))
    lin_layers = tuple(i for i, k in enumerate(kinds) if k == LINEAR_ATTENTION)
    n_lin = len(lin_layers)
    for kind in (FULL_ATTENTION, SLIDING_ATTENTION):
        dense += _attention(spec, cfg, kind, tuple(i for i in every if kinds[i] == kind), linears)

    # ---- linear-attention mixers
    state = spec.linear_state
    if n_lin and state is not None and mt in _GDN_TYPES:
        nk, nv = _int(cfg, "linear_num_key_heads"), _int(cfg, "linear_num_value_heads")
        hk, hv = _int(cfg, "linear_key_head_dim"), _int(cfg, "linear_value_head_dim")
        linears += named_linears(h, 2 * nk * hk + 2 * nv * hv, ("linear_attn.in_proj_qkvz",),
                                 lin_layers)
        linears += named_linears(h, 2 * nv, ("linear_attn.in_proj_ba",), lin_layers)
        linears += named_linears(nv * hv, h, ("linear_attn.out_proj",), lin_layers)
        dense += (state.conv_dim * state.conv_kernel + 2 * nv + hv) * n_lin
    elif n_lin and state is not None:
        heads, hdim = state.temporal_heads, state.temporal_head_dim
        inner = heads * hdim
        groups, dstate = state.n_groups, state.state_size
        mixer = "mixer" if mt == "nemotron_h" else "mamba"
        linears += named_linears(h, 2 * inner + 2 * groups * dstate + heads,
                                 (f"{mixer}.in_proj",), lin_layers)
        linears += named_linears(inner, h, (f"{mixer}.out_proj",), lin_layers)
        conv_bias = state.conv_dim if cfg.get("use_conv_bias", True) else 0
        dense += (state.conv_dim * state.conv_kernel + conv_bias + 3 * heads + inner) * n_lin

    # ---- feed-forward
    moe = spec.moe
    inter = spec.intermediate_size or 0
    if mt == "nemotron_h":
        pattern = str(cfg.get("hybrid_override_pattern") or "")
        dense_layers = tuple(i for i, c in enumerate(pattern) if c == "-")
        moe_layers = tuple(i for i, c in enumerate(pattern) if c == "E")
        n_moe = len(moe_layers)
        linears += named_linears(h, inter, ("mixer.up_proj",), dense_layers)
        linears += named_linears(inter, h, ("mixer.down_proj",), dense_layers)
        if n_moe and moe is not None:
            e, e_inter = moe.num_experts, moe.moe_intermediate_size or inter
            linears += named_linears(h, e_inter, ("mixer.experts.0.up_proj",), moe_layers, e, True)
            linears += named_linears(e_inter, h, ("mixer.experts.0.down_proj",), moe_layers, e,
                                     True)
            shared = _int(cfg, "moe_shared_expert_intermediate_size")
            if shared:
                linears += named_linears(h, shared, ("mixer.shared_experts.up_proj",), moe_layers)
                linears += named_linears(shared, h, ("mixer.shared_experts.down_proj",), moe_layers)
            dense += (h * e + e) * n_moe  # router and its score-correction bias
        norms = n_layers
    elif mt == "llama4_text" and moe is not None:
        step = max(1, _int(cfg, "interleave_moe_layer_step", default=1))
        moe_layers = tuple(i for i in every if (i + 1) % step == 0)
        dense_layers = tuple(i for i in every if (i + 1) % step != 0)
        n_moe = len(moe_layers)
        e, e_inter = moe.num_experts, moe.moe_intermediate_size or inter
        ff = "feed_forward"
        linears += named_linears(h, e_inter, (f"{ff}.experts.gate_up_proj",), moe_layers,
                                 2 * e, True)
        linears += named_linears(e_inter, h, (f"{ff}.experts.down_proj",), moe_layers, e, True)
        linears += named_linears(h, inter, (f"{ff}.shared_expert.gate_proj",
                                            f"{ff}.shared_expert.up_proj"), moe_layers)
        linears += named_linears(inter, h, (f"{ff}.shared_expert.down_proj",), moe_layers)
        dense += h * e * n_moe
        mlp = _int(cfg, "intermediate_size_mlp", default=inter)
        linears += named_linears(h, mlp, (f"{ff}.gate_proj", f"{ff}.up_proj"), dense_layers)
        linears += named_linears(mlp, h, (f"{ff}.down_proj",), dense_layers)
        norms = 2 * n_layers
    else:
        ffn_layers = every
        gate_up_mlp = ("mlp.gate_proj", "mlp.up_proj")
        if mt == "gemma4_text" and cfg.get("use_double_wide_mlp") and spec.kv_shared_layers:
            wide = every[n_layers - spec.kv_shared_layers:]  # the KV-shared layers come last
            linears += named_linears(h, 2 * inter, gate_up_mlp, wide)
            linears += named_linears(2 * inter, h, ("mlp.down_proj",), wide)
            ffn_layers = every[:n_layers - spec.kv_shared_layers]
        if moe is None or mt == "gemma4_text":
            linears += named_linears(h, inter, gate_up_mlp, ffn_layers)
            linears += named_linears(inter, h, ("mlp.down_proj",), ffn_layers)
        if moe is not None:
            e, e_inter = moe.num_experts, moe.moe_intermediate_size or inter
            if mt == "gemma4_text":  # fused gate/up tensors of all experts of a layer
                ex = "experts"
                linears += named_linears(h, e_inter, (f"{ex}.gate_up_proj",), every, 2 * e, True)
            else:  # expert 0 stands for its layer's experts (see .bytemodel)
                ex = "mlp.experts.0"
                linears += named_linears(h, e_inter, (f"{ex}.gate_proj", f"{ex}.up_proj"),
                                         every, e, True)
            linears += named_linears(e_inter, h, (f"{ex}.down_proj",), every, e, True)
            dense += h * e * n_layers  # router
            if mt == "gemma4_text":
                dense += (h + e + 3 * h) * n_layers  # router scale, per-expert scale, 3 norms
            elif mt == "granitemoehybrid" and _int(cfg, "shared_intermediate_size"):
                s_inter = _int(cfg, "shared_intermediate_size")  # Granite 4's shared MLP
                linears += named_linears(h, s_inter, ("shared_mlp.input_linear",), every, 2)
                linears += named_linears(s_inter, h, ("shared_mlp.output_linear",), every)
            elif moe.num_shared_experts:
                s_inter = _int(cfg, "shared_expert_intermediate_size",
                               default=e_inter * moe.num_shared_experts)
                linears += named_linears(h, s_inter, ("mlp.shared_expert.gate_proj",
                                                      "mlp.shared_expert.up_proj"), every)
                linears += named_linears(s_inter, h, ("mlp.shared_expert.down_proj",), every)
                dense += h * n_layers  # the shared expert's gate
        norms = (4 if mt == "gemma4_text" else 2) * n_layers
    dense += norms * h + h
    if mt == "gemma4_text":
        dense += n_layers  # layer scalars
        ple = _int(cfg, "hidden_size_per_layer_input")
        if ple:
            vocab_pl = _int(cfg, "vocab_size_per_layer_input", default=spec.vocab_size)
            dense += vocab_pl * n_layers * ple + ple  # per-layer embeddings and their norm
            linears.append(Linear(h, n_layers * ple, 1, name="per_layer_model_projection"))
            linears += named_linears(h, ple, ("per_layer_input_gate",), every)
            linears += named_linears(ple, h, ("per_layer_projection",), every)
            dense += h * n_layers  # post per-layer-input norms
    embedding = spec.vocab_size * h
    lm_head = 0 if spec.tie_word_embeddings else spec.vocab_size * h
    dense += embedding + lm_head
    return ParamBreakdown(tuple(linears), dense, embedding, lm_head)


def tower_params(config: Mapping[str, Any]) -> int:
    """Parameters of a Gemma 4 vision / audio tower that :mod:`.vision` has no rule for.

    A transformer encoder per ``*_config``: per layer q/k/v/o of the hidden width, a gated MLP
    of ``intermediate_size`` (Gemma 4 vision) and four norms, plus a patch embedding, a position
    table and the projector into the text width; the audio tower (a conformer) is sized the
    same way from its hidden width, with a feed-forward of four hidden widths.
    Returns 0 when the config has no such section.
    """
    return gemma4_vision_params(config) + gemma4_audio_params(config)


def _text_hidden(config: Mapping[str, Any]) -> int:
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else {}
    return _int(text or {}, "hidden_size")


def gemma4_vision_params(config: Mapping[str, Any]) -> int:
    """Parameters of a Gemma 4 vision tower and its projector (0 without ``vision_config``)."""
    vision = config.get("vision_config")
    if not (isinstance(vision, Mapping) and str(vision.get("model_type", "")).startswith("gemma4")):
        return 0
    vh, vi = _int(vision, "hidden_size"), _int(vision, "intermediate_size")
    layers, patch = _int(vision, "num_hidden_layers"), _int(vision, "patch_size", default=16)
    total = layers * (4 * vh * vh + 3 * vh * vi + 4 * vh)
    total += 3 * patch * patch * vh + 2 * _int(vision, "position_embedding_size") * vh
    return total + vh * _text_hidden(config) + vh


def gemma4_audio_params(config: Mapping[str, Any]) -> int:
    """Parameters of a Gemma 4 audio tower and its projector (0 without ``audio_config``)."""
    audio = config.get("audio_config")
    if not (isinstance(audio, Mapping) and str(audio.get("model_type", "")).startswith("gemma4")):
        return 0
    ah, layers = _int(audio, "hidden_size"), _int(audio, "num_hidden_layers")
    total = layers * (4 * ah * ah + 2 * 2 * ah * 4 * ah + 2 * ah * ah + 10 * ah)
    return total + _int(audio, "output_proj_dims", default=ah) * ah + ah * _text_hidden(config)
