"""The vision encoder of a vision-language checkpoint, read from ``config.json``.

vLLM profiles a multimodal model's encoder before it sizes the KV cache: it runs the encoder on
dummy images of the largest size the processor produces and keeps the outputs while the
language model's dummy batch runs (see :mod:`kvpilot.core.fit.multimodal`). What that costs
depends on a few numbers per family, all read here from ``vision_config`` and, where the image
size is a processor setting, from ``preprocessor_config.json``:

* Qwen2-VL / Qwen2.5-VL / Qwen3-VL: images are resized to at most ``max_pixels`` (the
  processor's ``max_pixels`` or ``size.longest_edge``); one language-model token per
  ``(patch x merge)^2`` pixels, ``merge^2`` encoder patches per token. These models take videos
  too.
* Gemma 3: SigLIP at ``image_size`` (896 -> 64 x 64 = 4,096 patches), pooled to
  ``mm_tokens_per_image`` (256) tokens.
* Mistral 3 (Pixtral encoder): ``image_size`` 1540 / patch 14 = 110 x 110 patches, merged 2 x 2
  into 55 x 55 tokens plus one break token per row (3,080 placeholder positions, the contiguous
  length 0.10 budgets; 0.20 and later count the 3,025 embeddings).
* LLaVA (CLIP): (``image_size`` / patch)^2 tokens (576 at 336 px), one CLS position more.
* Gemma 4: ``vision_soft_tokens_per_image`` (``default_output_length``, 280) tokens per image,
  each pooled from ``pooling_kernel_size``^2 (3 x 3) patches; video frames at 70 tokens
  (gemma4_mm.py). The audio tower is sized apart (:func:`.bytemodel_hybrid.gemma4_audio_params`).
* Mllama (Llama 3.2 Vision): ``max_num_tiles`` tiles of (560 / 14)^2 + 1 = 1,601 positions
  (padded to 1,608 in the encoder); the decoder's ``cross_attention_layers`` read them.

The parameter counts of each tower and projector are exact sums of the published layer shapes
(checked on Gemma 3 4B: 419,816,304, the figure the catalog carries).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import VisionSpec

#: ``architectures[0]`` -> the rule set of this module
VISION_ARCHITECTURES: Mapping[str, str] = {
    "Qwen2VLForConditionalGeneration": "qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "qwen2_5_vl",
    "Qwen3VLForConditionalGeneration": "qwen3_vl",
    "Qwen3VLMoeForConditionalGeneration": "qwen3_vl",
    # vLLM's qwen3_5.py builds the Qwen3-VL vision transformer and processing info
    "Qwen3_5ForConditionalGeneration": "qwen3_vl",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_vl",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Gemma4ForConditionalGeneration": "gemma4",
    "Mistral3ForConditionalGeneration": "mistral3",
    "LlavaForConditionalGeneration": "llava",
    "MllamaForConditionalGeneration": "mllama",
}

#: ``max_pixels`` of the published ``preprocessor_config.json`` (Qwen2-VL-7B-Instruct and
#: Qwen2.5-VL-7B-Instruct: 12,845,056 = 16,384 x 28 x 28; Qwen3-VL: ``size.longest_edge``
#: 16,777,216 = 16,384 x 32 x 32), used when the directory holds no processor config
DEFAULT_MAX_PIXELS: Mapping[str, int] = {
    "qwen2_vl": 12845056,
    "qwen2_5_vl": 12845056,
    "qwen3_vl": 16777216,
}

#: first vLLM release whose model class skips the tower when every modality's
#: ``--limit-mm-per-prompt`` is 0 (``qwen2_vl.py`` & co. in 0.10.1.1, not in 0.10.0;
#: ``gemma3_mm.py`` in 0.16.0, not in 0.13.0; Qwen3-VL from its first release)
TOWER_SKIPPABLE_SINCE: Mapping[str, tuple[int, ...]] = {
    "qwen2_vl": (0, 10, 1),
    "qwen2_5_vl": (0, 10, 1),
    "mistral3": (0, 10, 1),
    "llava": (0, 10, 1),
    "qwen3_vl": (0, 11),
    "gemma3": (0, 16),
    # every release that serves Gemma 4 (_mark_tower_model in the 0.21.0 wheel's gemma4_mm.py)
    "gemma4": (0, 0),
}

_Builder = Callable[["_Source"], "VisionSpec"]

#: vLLM's model registry lists Mllama as removed after 0.10.2 (V0 engine only)
LAST_RELEASE: Mapping[str, tuple[int, ...]] = {"mllama": (0, 10, 2)}



class _VisionFields:
    """``vision_config`` lookups (or, with ``prefix=""``, the top-level config's) that name the
    missing or bad field in their error."""

    def __init__(self, cfg: Mapping[str, Any], where: str, prefix: str = "vision_config.") -> None:
        self.cfg = cfg
        self.where = where
        self.prefix = prefix

    def int(self, *names: str, default: int | None = None) -> int:
        for name in names:
            value = self.cfg.get(name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ModelSpecError(
                    f"expected a positive integer, got {value!r}",
                    path=self.where,
                    field=f"{self.prefix}{name}",
                )
            return int(value)
        if default is not None:
            return default
        raise ModelSpecError(
            f"required field is missing from {self.prefix.rstrip('.') or 'config.json'}; "
            "kvpilot cannot size the vision encoder without it",
            path=self.where,
            field=f"{self.prefix}{names[0]}",
        )


@dataclass(frozen=True)
class _Source:
    """What a family's builder reads: ``vision_config`` (``fields``), the whole ``config``, its
    ``text`` config, the language model's width ``text_hidden`` (the projector's output) and the
    parsed ``preprocessor_config.json`` (None when the checkpoint has none)."""

    fields: _VisionFields
    config: Mapping[str, Any]
    text: Mapping[str, Any]
    text_hidden: int
    preprocessor: Mapping[str, Any] | None

    def top_level_int(self, name: str, *, default: int) -> int:
        """A positive integer of the top-level config, checked like ``vision_config``'s."""
        return _VisionFields(self.config, self.fields.where, prefix="").int(name, default=default)


def max_pixels_from_preprocessor(preprocessor: Mapping[str, Any] | None) -> int | None:
    """The largest image area (pixels) a Qwen-VL processor config allows, or None."""
    if not preprocessor:
        return None
    for holder in (preprocessor, preprocessor.get("size")):
        if not isinstance(holder, Mapping):
            continue
        for key in ("max_pixels", "longest_edge"):
            value = holder.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def vision_spec_from_config(
    config: Mapping[str, Any],
    architecture: str,
    *,
    text_hidden_size: int,
    text_config: Mapping[str, Any] | None = None,
    preprocessor: Mapping[str, Any] | None = None,
    where: str = "",
) -> VisionSpec | None:
    """The :class:`VisionSpec` of a vision-language config, or None for other architectures.

    ``text_hidden_size`` is the language model's width (the projector's output);
    ``preprocessor`` the parsed ``preprocessor_config.json`` when the checkpoint has one.

    Raises:
        ModelSpecError: ``vision_config`` is missing or lacks a field the family needs.
    """
    family = VISION_ARCHITECTURES.get(architecture)
    if family is None:
        return None
    raw = config.get("vision_config")
    if not isinstance(raw, Mapping):
        raise ModelSpecError(
            f"{architecture} needs a vision_config object in config.json",
            path=where,
            field="vision_config",
        )
    source = _Source(_VisionFields(raw, where), config, text_config or {}, text_hidden_size,
                     preprocessor)
    return _BUILDERS[family](source)


# ---- per family -----------------------------------------------------------------------------


def _qwen_tokens(max_pixels: int, patch: int, merge: int) -> tuple[int, int]:
    """(LM tokens, encoder patches) of the largest image a Qwen-VL processor makes."""
    factor = patch * merge
    tokens = max(1, max_pixels // (factor * factor))
    return tokens, tokens * merge * merge


@dataclass(frozen=True)
class _QwenTower:
    """How one Qwen-VL generation lays out its vision tower (the rest is shared)."""

    family: str
    width_field: str  # "embed_dim" (Qwen2-VL) or "hidden_size"
    patch_fields: tuple[str, ...]
    default_patch: int
    channel_fields: tuple[str, ...]
    out_field: str
    norm_params_per_channel: int  # LayerNorm with bias: 2; RMSNorm: 1
    gated_mlp: bool  # SiLU gate + up projections (Qwen2.5-VL)
    learned_positions: bool  # patch-embed bias + position table + deepstack mergers (Qwen3-VL)


_QWEN_TOWERS: Mapping[str, _QwenTower] = {
    "qwen2_vl": _QwenTower(
        "qwen2_vl", "embed_dim", ("patch_size", "spatial_patch_size"), 14,
        ("in_chans", "in_channels"), "hidden_size", 2, gated_mlp=False, learned_positions=False,
    ),
    "qwen2_5_vl": _QwenTower(
        "qwen2_5_vl", "hidden_size", ("patch_size",), 14, ("in_chans", "in_channels"),
        "out_hidden_size", 1, gated_mlp=True, learned_positions=False,
    ),
    "qwen3_vl": _QwenTower(
        "qwen3_vl", "hidden_size", ("patch_size",), 16, ("in_channels", "in_chans"),
        "out_hidden_size", 2, gated_mlp=False, learned_positions=True,
    ),
}


def _qwen_vl(tower: _QwenTower, source: _Source) -> VisionSpec:
    """A Qwen2-VL / Qwen2.5-VL / Qwen3-VL tower: ViT blocks, then a 2x2 patch merger."""
    f, text_hidden, pre = source.fields, source.text_hidden, source.preprocessor
    hidden = f.int(tower.width_field)
    if tower.width_field == "embed_dim":
        inter = int(hidden * float(f.cfg.get("mlp_ratio", 4)))
    else:
        inter = f.int("intermediate_size")
    depth = f.int("depth")
    heads = f.int("num_heads")
    patch = f.int(*tower.patch_fields, default=tower.default_patch)
    merge = f.int("spatial_merge_size", default=2)
    temporal = f.int("temporal_patch_size", default=2)
    channels = f.int(*tower.channel_fields, default=3)
    out = f.int(tower.out_field, default=text_hidden)
    norm = tower.norm_params_per_channel * hidden
    attention = (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden)
    up = 2 if tower.gated_mlp else 1
    mlp = up * (hidden * inter + inter) + (inter * hidden + hidden)
    ctx = hidden * merge * merge
    merger = norm + (ctx * ctx + ctx) + (ctx * out + out)
    params = channels * temporal * patch * patch * hidden + depth * (2 * norm + attention + mlp)
    params += merger
    n_deep = 0
    if tower.learned_positions:
        positions = f.int("num_position_embeddings", default=2304)
        deepstack = f.cfg.get("deepstack_visual_indexes") or []
        n_deep = len(deepstack) if isinstance(deepstack, list) else 0
        deep_merger = 2 * ctx + (ctx * ctx + ctx) + (ctx * out + out)
        params += hidden + positions * hidden + n_deep * deep_merger
    tokens, patches = _qwen_tokens(
        max_pixels_from_preprocessor(pre) or DEFAULT_MAX_PIXELS[tower.family], patch, merge
    )
    return VisionSpec(
        family=tower.family, hidden_size=hidden, intermediate_size=inter, num_layers=depth,
        num_heads=heads, patch_size=patch, max_image_tokens=tokens, max_image_patches=patches,
        params=params,
        # Qwen3-VL's encoder output carries the deepstack features beside the main embedding
        text_hidden_size=out * (1 + n_deep), supports_video=True,
        tower_skippable_since=TOWER_SKIPPABLE_SINCE[tower.family],
    )


def _qwen_builder(family: str) -> _Builder:
    tower = _QWEN_TOWERS[family]
    return lambda source: _qwen_vl(tower, source)


def _vit_layer(hidden: int, inter: int) -> int:
    """One pre-norm ViT layer with biases (SigLIP / CLIP): 2 LayerNorms, q/k/v/o, fc1/fc2."""
    return 4 * hidden + 4 * (hidden * hidden + hidden) + (hidden * inter + inter) + (
        inter * hidden + hidden
    )


@dataclass(frozen=True)
class _ViT:
    """The fields a fixed-resolution ViT tower (SigLIP, CLIP, Pixtral) reads from its config."""

    hidden: int
    inter: int
    layers: int
    heads: int
    patch: int
    image: int
    channels: int

    @classmethod
    def read(cls, f: _VisionFields, *, image: int, sizes: tuple[int, ...] = ()) -> _ViT:
        """``sizes``: defaults for hidden, intermediate, layers and heads (none: required)."""
        hidden, inter, layers, heads = sizes or (None, None, None, None)
        return cls(
            hidden=f.int("hidden_size", default=hidden),
            inter=f.int("intermediate_size", default=inter),
            layers=f.int("num_hidden_layers", default=layers),
            heads=f.int("num_attention_heads", default=heads),
            patch=f.int("patch_size", default=14),
            image=f.int("image_size", default=image),
            channels=f.int("num_channels", default=3),
        )

    @property
    def grid(self) -> int:
        """Patches along one side of the image."""
        return self.image // self.patch

    @property
    def patch_embed_params(self) -> int:
        """The patch embedding: one conv over ``patch`` x ``patch`` pixels, with its bias."""
        return self.channels * self.patch * self.patch * self.hidden + self.hidden

    def spec(
        self, family: str, source: _Source, *, tokens: int, patches: int, params: int
    ) -> VisionSpec:
        return VisionSpec(
            family=family, hidden_size=self.hidden, intermediate_size=self.inter,
            num_layers=self.layers, num_heads=self.heads, patch_size=self.patch,
            max_image_tokens=tokens, max_image_patches=patches, params=params,
            text_hidden_size=source.text_hidden,
            tower_skippable_since=TOWER_SKIPPABLE_SINCE[family],
        )


def _gemma3(source: _Source) -> VisionSpec:
    vit = _ViT.read(source.fields, image=896)
    positions = vit.grid * vit.grid
    tokens = source.top_level_int("mm_tokens_per_image", default=256)
    hidden, text_hidden = vit.hidden, source.text_hidden
    params = vit.patch_embed_params + positions * hidden
    params += vit.layers * _vit_layer(hidden, vit.inter) + 2 * hidden  # post layernorm
    params += hidden * text_hidden + hidden  # mm_input_projection + mm_soft_emb_norm
    return vit.spec("gemma3", source, tokens=tokens, patches=positions, params=params)


def _gemma4(source: _Source) -> VisionSpec:
    from kvpilot.core.models.bytemodel_hybrid import gemma4_vision_params

    f = source.fields
    tokens = f.int("default_output_length", default=source.top_level_int(
        "vision_soft_tokens_per_image", default=280))
    pool = f.int("pooling_kernel_size", default=3)
    return VisionSpec(
        family="gemma4", hidden_size=f.int("hidden_size"),
        intermediate_size=f.int("intermediate_size"), num_layers=f.int("num_hidden_layers"),
        num_heads=f.int("num_attention_heads"), patch_size=f.int("patch_size", default=16),
        max_image_tokens=tokens, max_image_patches=tokens * pool * pool,
        params=gemma4_vision_params(source.config), text_hidden_size=source.text_hidden,
        supports_video=True, tower_skippable_since=TOWER_SKIPPABLE_SINCE["gemma4"],
    )


def _mistral3(source: _Source) -> VisionSpec:
    vit = _ViT.read(source.fields, image=1540)
    merge = source.top_level_int("spatial_merge_size", default=2)
    cols = rows = vit.grid // merge
    tokens = (cols + 1) * rows  # one [IMG_BREAK] per row, [IMG_END] after the last
    # Pixtral: conv without bias, RMS ln_pre, per layer 2 RMS norms, q/k/v/o and a gated MLP
    # without biases
    hidden, text_hidden = vit.hidden, source.text_hidden
    layer = 2 * hidden + 4 * hidden * hidden + 3 * hidden * vit.inter
    bias = 1 if source.config.get("multimodal_projector_bias") else 0
    projector = hidden + (hidden * merge * merge) * hidden  # norm + patch merger
    projector += hidden * text_hidden + bias * text_hidden
    projector += text_hidden * text_hidden + bias * text_hidden
    params = vit.patch_embed_params + vit.layers * layer + projector
    return vit.spec("mistral3", source, tokens=tokens, patches=vit.grid * vit.grid, params=params)


def _llava(source: _Source) -> VisionSpec:
    vit = _ViT.read(source.fields, image=336, sizes=(1024, 4096, 24, 16))  # CLIP ViT-L/14-336
    positions = vit.grid * vit.grid + 1  # CLS
    strategy = str(source.config.get("vision_feature_select_strategy", "default"))
    tokens = vit.grid * vit.grid if strategy == "default" else positions
    hidden, text_hidden = vit.hidden, source.text_hidden
    params = vit.patch_embed_params + positions * hidden
    params += 2 * hidden + vit.layers * _vit_layer(hidden, vit.inter) + 2 * hidden  # norms
    params += (hidden * text_hidden + text_hidden) + (text_hidden * text_hidden + text_hidden)
    return vit.spec("llava", source, tokens=tokens, patches=positions, params=params)


def _mllama(source: _Source) -> VisionSpec:
    f, text_hidden = source.fields, source.text_hidden
    hidden = f.int("hidden_size")
    inter = f.int("intermediate_size")
    layers = f.int("num_hidden_layers")
    global_layers = f.int("num_global_layers", default=8)
    heads = f.int("attention_heads", "num_attention_heads")
    patch = f.int("patch_size", default=14)
    image = f.int("image_size", default=560)
    tiles = f.int("max_num_tiles", default=4)
    channels = f.int("num_channels", default=3)
    out_dim = f.int("vision_output_dim", default=hidden * 6)
    ratios = f.cfg.get("supported_aspect_ratios")
    n_ratios = (len(ratios) if isinstance(ratios, list) else 8) + 1
    per_tile = (image // patch) ** 2 + 1
    padded = math.ceil(per_tile / 8) * 8
    layer = 4 * hidden + 4 * hidden * hidden + (hidden * inter + inter) + (inter * hidden + hidden)
    params = channels * patch * patch * hidden + hidden + per_tile * hidden + 1
    params += n_ratios * tiles * per_tile * hidden  # gated tile-position embedding
    params += 2 * (n_ratios * tiles * hidden + 1)  # pre/post tile embeddings with gates
    params += 4 * hidden  # layernorm_pre / layernorm_post
    params += layers * layer + global_layers * (layer + 2)
    params += out_dim * text_hidden + text_hidden  # multi_modal_projector
    cross = source.text.get("cross_attention_layers") or []
    cross_layers = tuple(int(i) for i in cross if isinstance(i, int)) if isinstance(
        cross, list) else ()
    return VisionSpec(
        family="mllama", hidden_size=hidden, intermediate_size=inter,
        num_layers=layers + global_layers, num_heads=heads, patch_size=patch,
        max_image_tokens=tiles * per_tile, max_image_patches=tiles * padded, params=params,
        text_hidden_size=text_hidden, cross_attention_layers=cross_layers,
        last_vllm_release=LAST_RELEASE["mllama"],
    )


_BUILDERS: Mapping[str, _Builder] = {
    **{family: _qwen_builder(family) for family in _QWEN_TOWERS},
    "gemma3": _gemma3,
    "mistral3": _mistral3,
    "gemma4": _gemma4,
    "llava": _llava,
    "mllama": _mllama,
}

assert set(_BUILDERS) == set(VISION_ARCHITECTURES.values())


def vision_weight_bytes(vision: VisionSpec, elem_bytes: int = 2) -> int:
    """Bytes of the vision tower and projector (16-bit unless ``elem_bytes`` says otherwise)."""
    return vision.params * elem_bytes
