"""The vision encoder's share of vLLM's profile run, and what "text only" gives back.

Before it sizes the KV cache, vLLM profiles a vision-language model's encoder as well as the
language model (all sizes below in bytes, counts in tokens or items):

V1 engine (``gpu_model_runner.py`` ``profile_run``; ``MultiModalBudget`` in
``v1/worker/utils.py`` at 0.10.2, ``multimodal/encoder_budget.py`` at 0.20.2 and 0.32.0, the V2
runner's ``encoder_runner.profile_encoder_cache`` at 0.32.0)
    The modality with the most tokens per item (``get_mm_max_tokens_per_item``: the largest
    image, or for Qwen2-VL / Qwen2.5-VL the longest video that fits ``max_model_len``) is
    encoded as one batch of ``items`` dummy items of the largest size, and the outputs are kept
    in the encoder cache while the language model's dummy batch and the sampler run.
    ``encoder_budget = max(max_num_batched_tokens, tokens_per_item)``
    (``compute_mm_encoder_budget``; the scheduler sets ``max_num_encoder_input_tokens`` and
    ``encoder_cache_size`` to ``max_num_batched_tokens``). From 0.10:
    ``items = max(1, min(budget // tokens_per_item,
    max_num_seqs x max(1, min(limit, max_model_len // tokens_per_item))))``; before 0.10
    (0.8.5, 0.9.2): ``items = min(ceil(budget / tokens_per_item), max_num_seqs x limit)``. The
    default limit is 999 items per prompt.
V0 engine (``worker/model_runner.py`` ``profile_run`` at 0.6.6)
    ``max_num_seqs`` drops to ``max(1, max_num_batched_tokens // max_mm_tokens)`` (the tokens
    of every modality at its limit, 1 per modality by default); each dummy sequence holds
    ``limit`` images, encoded inside the forward pass. The encoder-decoder runner that serves
    Mllama (``worker/enc_dec_model_runner.py`` at 0.10.2) keeps all ``max_num_seqs`` sequences,
    each with its image: 256 of them by default, which is why Llama 3.2 Vision needs a small
    ``--max-num-seqs`` to start.

The V1 encoder cache is not carved out of the KV pool: at run time it holds at most
``encoder_cache_size`` tokens of embeddings in memory that the profile's held outputs kept free.

The encoder's activations per position are modelled like the language model's
(:func:`kvpilot.core.fit.activation.forward_peak_bytes`: about 3 x intermediate + 3 x hidden
elements); the profile's peak is then
``max(encoder forward + outputs, outputs + language-model peak)``, so the budget term is
``outputs + max(0, encoder forward - language-model peak)``.

``--limit-mm-per-prompt`` 0 for every modality (kvpilot's ``limit_mm_per_prompt=0``) skips the
encoder profile, and from the release each family's tower became optional (see
:data:`kvpilot.core.models.vision.TOWER_SKIPPABLE_SINCE`) the tower's weights are not loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvpilot.core.base import versions
from kvpilot.core.base.model_spec import ModelSpec, VisionSpec
from kvpilot.core.base.versions import Release
from kvpilot.core.fit import activation
from kvpilot.core.models.vision import vision_weight_bytes

#: items per prompt when ``--limit-mm-per-prompt`` is not given (V1 engine; V0 allowed 1)
DEFAULT_LIMIT_V1 = 999
DEFAULT_LIMIT_V0 = 1
#: frames of the longest dummy video (``_MAX_FRAMES_PER_VIDEO`` of qwen2_vl.py)
MAX_FRAMES_PER_VIDEO = 16

#: families whose dummy video vLLM sizes from ``max_model_len`` (qwen2_vl.py's rule). Qwen3-VL
#: sizes its dummy video as two frames at the video processor's ``longest_edge`` / 2
#: (qwen3_vl.py ``get_max_video_tokens`` at 0.20.2): 12,288 tokens with the published
#: 25,165,824, fewer than its 16,384-token image, so the image is what it profiles
_QWEN_VIDEO_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl"})
#: Gemma 4's dummy video (gemma4_mm.py ``get_mm_max_tokens_per_item`` at 0.28.0): 32 frames of
#: at most 70 soft tokens each, plus a begin, an end and about 6 timestamp tokens per frame; its
#: 2,496 tokens outnumber an image's 280, so the video is what vLLM profiles
GEMMA4_VIDEO_FRAMES = 32
GEMMA4_FRAME_TOKENS = 70
GEMMA4_FRAME_EXTRA_TOKENS = 2 + 6


@dataclass(frozen=True)
class ProfileBatch:
    """The dummy batch vLLM profiles with: tokens and sequences per step, the longest request
    and ``--limit-mm-per-prompt`` (None: the release's default; 0: text only). ``engine``
    (``V0``/``V1``) is the engine the plan runs on, None for the release's own."""

    vllm_version: str | None
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    limit_mm_per_prompt: int | None
    engine: str | None = None


@dataclass(frozen=True)
class EncoderProfile:
    """What vLLM's multimodal profile takes for one plan (bytes per rank).

    ``modality`` and ``items`` x ``tokens_per_item`` are the dummy batch; ``encoder_peak_bytes``
    the encoder forward's activations, ``encoder_outputs_bytes`` the outputs kept while the
    language model's dummy batch runs; ``bytes`` the budget term (what the profile adds above
    the language-model activation peak). ``skipped`` when images are disabled.
    ``tower_weights_bytes`` are the vision weights vLLM leaves out (0 unless skipped on a
    release that can).
    """

    modality: str
    items: int
    tokens_per_item: int
    encoder_budget_tokens: int
    encoder_peak_bytes: int
    encoder_outputs_bytes: int
    bytes: int
    skipped: bool
    tower_weights_bytes: int
    note: str


def max_tokens_per_item(vision: VisionSpec, max_model_len: int) -> dict[str, int]:
    """``{modality: tokens of its largest dummy item}`` as ``get_mm_max_tokens_per_item``."""
    tokens = {"image": vision.max_image_tokens}
    if vision.family in _QWEN_VIDEO_FAMILIES:
        per_grid = vision.max_image_tokens
        grids = max_model_len // per_grid
        frames = max(min(2 * grids, MAX_FRAMES_PER_VIDEO), 1)
        tokens["video"] = max((frames + frames % 2) // 2, 1) * per_grid
    elif vision.family == "gemma4":
        tokens["video"] = GEMMA4_VIDEO_FRAMES * (GEMMA4_FRAME_TOKENS + GEMMA4_FRAME_EXTRA_TOKENS)
    return tokens


def _v0_mm_tokens(vision: VisionSpec, max_model_len: int, limit: int) -> int:
    per_item = max_tokens_per_item(vision, max_model_len)
    return per_item["image"] * limit + sum(t for m, t in per_item.items() if m != "image")


def runs_on_v0_only(model: ModelSpec, vllm_version: str | None) -> bool:
    """True for an architecture vLLM serves on the V0 engine only (Mllama: ``SupportsV0Only``
    in ``mllama.py``, so 0.8 to 0.10.2 fall back to V0 for it)."""
    return (
        model.vision is not None
        and model.vision.family == "mllama"
        and versions.supports("v0_engine", vllm_version)
    )


def _engine(model: ModelSpec, vllm_version: str | None, engine: str | None) -> str:
    if runs_on_v0_only(model, vllm_version):
        return "V0"
    return engine or activation.profile_for(vllm_version).engine


def profile_num_seqs(model: ModelSpec, batch: ProfileBatch) -> int:
    """Dummy sequences of the profile run (the sampler's rows).

    The V0 engine gives a vision-language model only
    ``max(1, min(max_num_seqs, max_num_batched_tokens // max_mm_tokens))`` sequences, so that
    each holds its images; V1 always samples ``max_num_seqs`` rows.
    """
    if model.vision is None or batch.limit_mm_per_prompt == 0 or _engine(
        model, batch.vllm_version, batch.engine
    ) != "V0":
        return batch.max_num_seqs
    if model.vision.cross_attention_layers:
        return batch.max_num_seqs  # the encoder-decoder runner keeps every sequence
    limit = DEFAULT_LIMIT_V0 if batch.limit_mm_per_prompt is None else batch.limit_mm_per_prompt
    mm_tokens = _v0_mm_tokens(model.vision, batch.max_model_len, limit)
    return max(1, min(batch.max_num_seqs, batch.max_num_batched_tokens // max(1, mm_tokens)))


def _positions_per_token(vision: VisionSpec) -> float:
    return vision.max_image_patches / max(1, vision.max_image_tokens)


def skipped_tower_bytes(vision: VisionSpec, vllm_version: str | None) -> int:
    """The vision weights ``vllm_version`` does not load when images are disabled (0 before the
    release the family's tower became optional)."""
    skippable = vision.tower_skippable_since
    if skippable is not None and Release.parse(vllm_version).at_least(Release(skippable)):
        return vision_weight_bytes(vision)
    return 0


def _encoder_positions(vision: VisionSpec, modality: str, items: int, tokens: int) -> int:
    """Encoder positions of ``items`` dummy items of ``tokens`` language-model tokens each."""
    if vision.family == "gemma4" and modality == "video":  # frames pooled like images
        per_frame = GEMMA4_FRAME_TOKENS * _positions_per_token(vision)
        return int(items * GEMMA4_VIDEO_FRAMES * per_frame)
    return int(items * tokens * _positions_per_token(vision))


def encoder_profile(
    model: ModelSpec,
    batch: ProfileBatch,
    *,
    language_peak_bytes: int,
    tensor_parallel_size: int = 1,
    elem_bytes: int = 2,
) -> EncoderProfile | None:
    """The encoder's budget term for a vision-language ``model``; None for other models.

    ``batch.engine`` is the engine the plan runs on (the V0 fallback below compute capability
    8.0 is the caller's to pass).
    """
    vision = model.vision
    if vision is None:
        return None
    vllm_version, max_model_len = batch.vllm_version, batch.max_model_len
    max_num_batched_tokens, max_num_seqs = batch.max_num_batched_tokens, batch.max_num_seqs
    limit_mm_per_prompt = batch.limit_mm_per_prompt
    version = Release.parse(vllm_version)
    engine = _engine(model, vllm_version, batch.engine)
    if limit_mm_per_prompt == 0:
        tower = skipped_tower_bytes(vision, vllm_version)
        tp = max(1, tensor_parallel_size)
        note = "images disabled (--limit-mm-per-prompt 0): no encoder profile"
        if tower:
            note += f"; vLLM {version.number} does not load the vision tower"
        return EncoderProfile("none", 0, 0, 0, 0, 0, 0, True, math.ceil(tower / tp), note)

    per_item = max_tokens_per_item(vision, max_model_len)
    if engine == "V0":
        limit = DEFAULT_LIMIT_V0 if limit_mm_per_prompt is None else limit_mm_per_prompt
        modality = "image"
        tokens = per_item["image"]
        mm_tokens = _v0_mm_tokens(vision, max_model_len, limit)
        seqs = profile_num_seqs(model, replace(batch, engine=engine))
        items = seqs * limit
        budget = seqs * mm_tokens
        rule = f"V0: {seqs} dummy sequence{'s' if seqs != 1 else ''} x {limit} image"
        if vision.cross_attention_layers:
            rule += " (encoder-decoder runner: every sequence carries its image)"
    else:
        limits = {m: DEFAULT_LIMIT_V1 for m in per_item}
        if limit_mm_per_prompt is not None:
            limits["image"] = limit_mm_per_prompt
        modality = max(per_item, key=lambda m: (per_item[m], m))
        tokens = per_item[modality]
        limit = limits[modality]
        budget = max(max_num_batched_tokens, tokens)
        if versions.supports("v1_items_per_prompt_rule", version):
            per_prompt = max(1, min(limit, max_model_len // tokens))
            items = max(1, min(budget // tokens, max_num_seqs * per_prompt))
        else:
            items = min(math.ceil(budget / tokens), max_num_seqs * limit)
        rule = f"V1 encoder budget {budget:,} tokens"
    positions = _encoder_positions(vision, modality, items, tokens)
    tp = max(1, tensor_parallel_size)
    per_position = (
        activation.FORWARD_INTERMEDIATE_FACTOR * vision.intermediate_size / tp
        + activation.FORWARD_HIDDEN_FACTOR * vision.hidden_size
    )
    encoder_peak = int(positions * per_position * elem_bytes)
    outputs = items * tokens * vision.text_hidden_size * elem_bytes
    term = outputs + max(0, encoder_peak - language_peak_bytes)
    note = (
        f"encoder profile: {items} {modality} item{'s' if items != 1 else ''} x {tokens:,} "
        f"tokens ({positions:,} encoder positions; {rule}); outputs "
        f"{outputs / (1 << 20):,.0f} MiB held during the language model's dummy batch"
    )
    return EncoderProfile(
        modality, items, tokens, budget, encoder_peak, outputs, term, False, 0, note
    )
