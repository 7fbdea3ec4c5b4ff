"""Speculative decoding (``--speculative-config``) in the memory budget, as vLLM counts it.

``--speculative-config`` is read by :mod:`kvpilot.core.base.speculative_config` (the method as
vLLM normalises it, ``num_speculative_tokens``, which for MTP defaults to the checkpoint's MTP
layer count, the draft ``model`` and ``draft_tensor_parallel_size``). What each method adds to
the budget (0.20.0 and 0.32.0 wheels):

* weights: MTP loads the checkpoint's ``num_nextn_predict_layers`` decoder layers (and their
  ``eh_proj``, 2h x h), which plain serving skips, less the block's own embedding and
  output-head copies (GLM-4.x and DeepSeek checkpoints), dropped for the target's; an MTP head
  in a checkpoint of its own (the ``model`` of a Gemma 4 target, whose config declares no MTP
  layers: its assistant), EAGLE / EAGLE-3 heads and draft models load their own checkpoint;
  ngram and suffix decoding load nothing.
* KV cache: every attention layer of the drafter (the MTP layers, the EAGLE head's layer, all
  layers of a draft model) joins the KV-cache config, so each block costs the drafter's pages
  too and the same memory holds fewer tokens; a Gemma 4 assistant's layers all read the
  target's cache (:data:`KV_SHARED_DRAFTERS`) and add none.
* profile run: ``_dummy_sampler_run`` also runs the rejection sampler over ``2 x max_num_seqs``
  logit rows (one draft and one bonus token per request); the drafter's own dummy forward
  follows the target's.
* CUDA graphs: the largest default capture size is
  ``min(max_num_seqs x (1 + num_speculative_tokens) x 2, 512)`` (``_set_cudagraph_sizes``, from
  the release row ``spec_decode_capture_scaled``), and the drafter captures graphs of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.speculative_config import (
    METHOD_MTP,
    NO_KV_METHODS,
    NO_NETWORK_METHODS,
    SpeculativeSettings,
)
from kvpilot.core.fit import kv

#: MTP drafters with a checkpoint of their own whose every attention layer reads the target's
#: KV cache (no pages of their own): the Gemma 4 assistants ("gemma4_assistant" and
#: "gemma4_unified_assistant" configs, whose ``architectures`` name these classes; vLLM
#: ``config/speculative.py`` turns them into ``gemma4_mtp`` with ``n_predict`` 1, and
#: ``model_executor/models/gemma4_mtp.py`` makes every layer KV-shared, 0.32.0 wheel)
KV_SHARED_DRAFTERS = frozenset({"Gemma4AssistantForCausalLM",
                                "Gemma4UnifiedAssistantForCausalLM"})


@dataclass(frozen=True)
class SpeculativeBudget:
    """What speculative decoding adds to a plan (bytes per GPU rank).

    ``draft_layers`` are the drafter's attention layers (they join the KV cache and
    ``kv_bytes_per_token`` is theirs per token); ``draft_known`` is False when the draft
    checkpoint could not be read, so its weights and KV are missing from the plan.
    """

    settings: SpeculativeSettings
    num_speculative_tokens: int
    draft_weights_bytes: int
    draft_layers: int
    draft_kv_bytes_per_token: int
    draft_known: bool
    failure: Failure | None
    note: str


#: model types whose MTP layer is a full-attention layer with an output gate: ``qkv_proj``
#: projects ``heads x (1 + attn_output_gate)`` query heads (``qwen3_next.py``
#: ``Qwen3NextAttention``, the decoder layer ``qwen3_5_mtp.py`` builds; 0.32.0 wheel)
GATED_MTP_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen3_5_text",
                             "qwen3_5_moe_text"})


def mtp_layer_bytes(model: ModelSpec, tensor_parallel_size: int = 1) -> int:
    """16-bit bytes of one MTP layer per rank: a decoder layer of the target's widths (every
    expert of an MoE layer; the query projection doubled by the output gate of
    :data:`GATED_MTP_TYPES`) plus ``eh_proj`` / ``fc`` (2h x h) and its norms; the embedding
    and lm_head are shared with the target (``_maybe_share_embeddings`` /
    ``_maybe_share_lm_head`` drop the drafter's copies, ``v1/spec_decode/llm_base_proposer.py``
    in the 0.32.0 wheel)."""
    h = model.hidden_size
    q = model.num_attention_heads * model.head_dim
    kvd = model.num_key_value_heads * model.head_dim
    gate = 2 if model.model_type in GATED_MTP_TYPES else 1
    attn = h * (gate * q + 2 * kvd) + q * h
    if model.moe is not None:
        inter = model.moe.moe_intermediate_size or model.intermediate_size or 4 * h
        mlp = (model.moe.num_experts + model.moe.num_shared_experts) * 3 * h * inter
        mlp += h * model.moe.num_experts
    else:
        mlp = 3 * h * (model.intermediate_size or 4 * h)
    params = attn + mlp + 2 * h * h + 4 * h
    return 2 * params // max(1, tensor_parallel_size)


def speculative_budget(
    model: ModelSpec,
    settings: SpeculativeSettings,
    *,
    draft: ModelSpec | None,
    draft_weights_bytes: int | None,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
) -> SpeculativeBudget:
    """The speculative-decoding terms for ``model`` (see the module docstring).

    ``draft`` is the spec of ``settings.model`` when it could be read, with
    ``draft_weights_bytes`` its weight bytes (the caller's byte model when no file size).

    Raises:
        FitError: an unknown KV dtype.
    """
    tp = settings.draft_tensor_parallel_size or tensor_parallel_size
    failure: Failure | None = None
    known = True
    if settings.method == METHOD_MTP and not (model.mtp_layers == 0 and settings.model):
        layers = model.mtp_layers
        tokens = settings.num_speculative_tokens or max(1, layers)
        if layers == 0:
            failure = Failure(
                failures.UNSUPPORTED_MODEL,
                f"{model.model_id} declares no MTP layers (num_nextn_predict_layers) in its "
                "config.json, so vLLM has no multi-token-prediction head to load; name the "
                'MTP checkpoint ("model", e.g. a Gemma 4 assistant), use another method '
                "(ngram, eagle3 with a draft) or turn speculative decoding off.",
            )
        elif tokens > layers and tokens % layers:
            failure = Failure(
                failures.BAD_FLAG_VALUE,
                f"num_speculative_tokens ({tokens}) must be a multiple of the model's "
                f"{layers} MTP layer(s) when it is larger.",
            )
        per_token = layers * kv.bytes_per_token_per_layer(model, kv_cache_dtype, tp)
        if model.mtp_weights_bytes:  # counted in the checkpoint's files, left out of its size
            # less the block's own embedding / output-head copies, dropped for the target's
            kept = model.mtp_weights_bytes - model.mtp_shared_copy_bytes
            weights = max(0, kept) // max(1, tp)
            sized = "as the checkpoint stores them"
        else:
            weights = layers * mtp_layer_bytes(model, tp)
            sized = "at 16 bits"
        note = (f"MTP: {layers} checkpoint layer(s) {sized}, "
                f"{tokens} draft token(s) per step")
    elif settings.method in NO_NETWORK_METHODS:
        tokens = settings.num_speculative_tokens or 1
        layers, weights, per_token = 0, 0, 0
        note = f"{settings.method}: no draft network, {tokens} draft token(s) per step"
    else:
        tokens = settings.num_speculative_tokens or 1
        if draft is None:
            known = False
            layers, weights, per_token = 0, 0, 0
            note = (f"{settings.method}: draft {settings.model!r} could not be read here, so "
                    "its weights and KV are not in the plan")
        else:
            weights = max(0, draft_weights_bytes or 0) // max(1, tp)
            if settings.method in NO_KV_METHODS or draft.architecture in KV_SHARED_DRAFTERS:
                layers, per_token = 0, 0
            else:
                layout = kv.kv_layout(draft, kv_cache_dtype, tp)
                layers = sum(g.num_layers for g in layout.groups)
                per_token = layout.kv_bytes_per_token
            note = (f"{settings.method}: draft {draft.model_id} ({layers} attention "
                    f"layer(s) of its own), {tokens} draft token(s) per step")
    return SpeculativeBudget(
        settings=settings, num_speculative_tokens=tokens, draft_weights_bytes=weights,
        draft_layers=layers, draft_kv_bytes_per_token=per_token, draft_known=known,
        failure=failure, note=note,
    )
