"""A :class:`ModelSpec` from a model directory: ``config.json`` plus safetensors headers.

An architecture without a rule here is read with the generic decoder model and marked
"estimated (unknown architecture)"; only a field that a term cannot do without is an error. A
vision-language checkpoint's encoder (:mod:`.vision`) is sized from ``vision_config`` and
``preprocessor_config.json``.

:func:`spec_from_config` turns a parsed ``config.json`` into a spec the way vLLM reads it (text
config of multimodal wrappers, explicit ``head_dim``, KV heads, layer kinds, MLA, MoE,
quantization, the rope factor of the derived max_model_len). :func:`load_local_model` adds the
exact weight bytes from the safetensors headers (see :mod:`.weights`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    MLA,
    NO_CACHE,
    SLIDING_ATTENTION,
    SOURCE_ESTIMATE,
    SOURCE_FILE,
    UNKNOWN_ARCHITECTURE_NOTE,
    ModelSpec,
    MoE,
    Quantization,
)
from kvpilot.core.base.quant_ignore import ignore_from_config
from kvpilot.core.base.quant_mixed import mixed_from_config
from kvpilot.core.models.bytemodel import estimate_weight_bytes
from kvpilot.core.models.bytemodel_hybrid import gemma4_audio_params, tower_params
from kvpilot.core.models.linear_config import linear_state_from_config
from kvpilot.core.models.mistral_params import PARAMS_FILE, config_from_mistral_params
from kvpilot.core.models.rope_cache import model_rope_bytes
from kvpilot.core.models.vision import (
    VISION_ARCHITECTURES,
    vision_spec_from_config,
    vision_weight_bytes,
)
from kvpilot.core.models.weights import checkpoint_weight_size

CONFIG_FILE = "config.json"
#: more decoder layers than this is a broken config.json, not a model (the largest have ~200)
MAX_LAYERS = 10_000
#: older AutoGPTQ checkpoints keep their quantization settings in a separate file
QUANTIZE_CONFIG_FILES = ("quantize_config.json", "quant_config.json")

#: architectures (``architectures[0]`` of config.json) whose memory layout kvpilot understands
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset(
    {
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen2MoeForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
        "GemmaForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Phi3ForCausalLM",
        "GptOssForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "ChatGLMModel",
        "ChatGLMForConditionalGeneration",
        "GlmForCausalLM",
        "Glm4ForCausalLM",
        "GraniteForCausalLM",
        "Olmo2ForCausalLM",
        "Mistral3ForConditionalGeneration",
        "LlavaForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "MllamaForConditionalGeneration",
        # 2026 architectures (vLLM 0.2x model files: gemma4, qwen3_next, qwen3_5, nemotron_h,
        # granitemoehybrid, llama4, glm4_moe)
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "Qwen3_5MoeForConditionalGeneration",
        "NemotronHForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "Llama4ForCausalLM",
        "Llama4ForConditionalGeneration",
        "Glm4MoeForCausalLM",
        "Glm4MoeLiteForCausalLM",  # GLM-4.7-Flash: DeepSeek-style MLA (glm4_moe_lite.py)
    }
)

_MULTIMODAL_ARCHITECTURES = frozenset(VISION_ARCHITECTURES)

#: processor settings that decide the largest image (Qwen-VL ``max_pixels``)
PREPROCESSOR_CONFIG_FILE = "preprocessor_config.json"

#: LlamaConfig defaults: LLaVA checkpoints write a sparse ``text_config`` that leaves them out
_LLAVA_LLAMA_DEFAULTS: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "max_position_embeddings": 2048,
    "vocab_size": 32000,
}

#: Gemma 3: five sliding layers, then one full-attention layer
_GEMMA3_PATTERN = 6

#: values that transformers' config classes use when config.json omits the key (sparse configs
#: such as Gemma 3's are written with every default left out)
_MODEL_TYPE_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma3_text": {
        "head_dim": 256,
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "sliding_window_pattern": _GEMMA3_PATTERN,
        "tie_word_embeddings": True,
    },
    "gemma2": {"head_dim": 256, "tie_word_embeddings": True},
    "gemma": {"head_dim": 256, "tie_word_embeddings": True},
    "gpt_oss": {"sliding_window": 128},
    "qwen3": {"head_dim": 128},
    "qwen3_moe": {"head_dim": 128},
    "qwen3_vl_text": {"head_dim": 128},
    "qwen3_vl_moe_text": {"head_dim": 128},
    "gemma4_text": {"tie_word_embeddings": True},
}

#: ChatGLM (GLM-4 remote code) spells the usual fields differently
_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("num_layers", "n_layer"),
    "intermediate_size": ("ffn_hidden_size",),
    "vocab_size": ("padded_vocab_size",),
    "num_attention_heads": ("n_head",),
    "head_dim": ("kv_channels",),
}

#: vLLM's candidates for the derived max_model_len; the smallest present wins
_MAX_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)

#: rope types whose factor vLLM does not multiply into the derived length
_ROPE_TYPES_NOT_EXTENDING = frozenset({"su", "longrope", "llama3"})

_LAYER_TYPE_VALUES = {
    "full_attention": FULL_ATTENTION,
    "attention": FULL_ATTENTION,
    "global": FULL_ATTENTION,
    "sliding_attention": SLIDING_ATTENTION,
    "sliding": SLIDING_ATTENTION,
    "local": SLIDING_ATTENTION,
    "linear_attention": LINEAR_ATTENTION,
    "mamba": LINEAR_ATTENTION,  # Granite 4 hybrid
}

#: Nemotron-H ``hybrid_override_pattern``: one character per layer
_HYBRID_PATTERN_KINDS = {"M": LINEAR_ATTENTION, "*": FULL_ATTENTION, "-": NO_CACHE, "E": NO_CACHE}


def read_json_object(path: Path, what: str = "config.json") -> dict[str, Any]:
    """Parse a JSON file that must hold an object.

    Raises:
        ModelSpecError: the file is missing, unreadable, not JSON, or not a JSON object.
    """
    if not path.is_file():
        raise ModelSpecError(
            f"no {what} here; point kvpilot at a model directory that contains {what} "
            "(a Hugging Face checkpoint)",
            path=str(path),
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ModelSpecError(f"cannot read {what}: {err.strerror}", path=str(path)) from err
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # incl. nesting too deep
        raise ModelSpecError(
            f"{what} is not valid JSON ({err}); download it again", path=str(path)
        ) from err
    if not isinstance(data, dict):
        raise ModelSpecError(f"{what} does not hold a JSON object", path=str(path))
    return data


def load_local_model(directory: str | Path, *, model_id: str | None = None) -> ModelSpec:
    """Read a model directory: config.json, quantization settings and exact weight bytes.

    When the directory holds no safetensors and no index, the weight bytes are estimated from
    the architecture (``weights_source == SOURCE_ESTIMATE``) and a note says so.

    Raises:
        ModelSpecError: missing/malformed config.json, an unsupported architecture, a missing
            required field, or a malformed safetensors header or index.
    """
    root = Path(directory).expanduser()
    if not root.is_dir():
        raise ModelSpecError(
            "not a directory; give a model directory, a Hugging Face repo id or a catalog id",
            path=str(root),
        )
    config_path = root / CONFIG_FILE
    if not config_path.is_file() and (root / PARAMS_FILE).is_file():
        config_path = root / PARAMS_FILE  # Mistral's own format, as --config-format mistral
        config = config_from_mistral_params(read_json_object(config_path, PARAMS_FILE))
    else:
        config = read_json_object(config_path)
    if "quantization_config" not in config:
        for name in QUANTIZE_CONFIG_FILES:
            qpath = root / name
            if qpath.is_file():
                config = {**config, "quantization_config": read_json_object(qpath, name)}
                break
    preprocessor = None
    if (root / PREPROCESSOR_CONFIG_FILE).is_file():
        preprocessor = read_json_object(root / PREPROCESSOR_CONFIG_FILE, PREPROCESSOR_CONFIG_FILE)
    spec = spec_from_config(
        config, model_id=model_id or str(root), source=str(root), config_path=str(config_path),
        preprocessor=preprocessor,
    )
    size = checkpoint_weight_size(root, config)
    if size is not None:
        return replace(
            spec,
            weights_bytes=size.total_bytes,
            weights_source=size.source,
            notes=spec.notes + size.notes,
            mtp_weights_bytes=size.mtp_bytes,
            mtp_shared_copy_bytes=size.mtp_shared_bytes,
        )
    estimate = config_weight_bytes(spec, config)
    return replace(
        spec,
        weights_bytes=estimate,
        weights_source=SOURCE_ESTIMATE,
        notes=(
            *spec.notes,
            "no safetensors files or index found; weight bytes estimated from the architecture",
        ),
    )


def config_weight_bytes(
    spec: ModelSpec, config: Mapping[str, Any], quantization: Quantization | None = None
) -> int:
    """The byte model's figure for a checkpoint known only by its ``config.json`` (bytes): the
    text model stored with ``quantization`` (default: the spec's), read with the raw config's
    keys the spec does not carry, plus the vision tower or Gemma 4's vision and audio towers
    (16-bit)."""
    quant = quantization if quantization is not None else spec.quantization
    estimate = estimate_weight_bytes(spec, quant, text_config_of(config))
    vision = vision_weight_bytes(spec.vision) if spec.vision is not None else 0
    return estimate + vision + spec.tower_weights_bytes  # Gemma 4's audio tower (16-bit)


def text_config_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """The text model's config: nested ``text_config`` (or ``llm_config``) merged over the top."""
    for key in ("text_config", "llm_config"):
        nested = config.get(key)
        if isinstance(nested, dict):
            merged = {
                k: v
                for k, v in config.items()
                if k not in ("text_config", "llm_config", "vision_config", "audio_config")
            }
            merged.pop("model_type", None)
            merged.update(nested)
            if "model_type" not in nested and config.get("model_type") == "gemma3":
                merged["model_type"] = "gemma3_text"
            merged.setdefault("model_type", config.get("model_type", ""))
            return merged
    return dict(config)


class _Fields:
    """Field lookup with aliases, model-type defaults and errors naming the field."""

    def __init__(self, cfg: Mapping[str, Any], model_type: str, path: str | None) -> None:
        self.cfg = cfg
        self.defaults = _MODEL_TYPE_DEFAULTS.get(model_type, {})
        self.path = path
        self.defaulted: list[str] = []

    def get(self, name: str) -> Any:
        for key in (name, *_ALIASES.get(name, ())):
            if self.cfg.get(key) is not None:
                return self.cfg[key]
        if name in self.defaults:
            self.defaulted.append(name)
            return self.defaults[name]
        return None

    def integer(self, name: str, *, required: bool = True) -> int | None:
        value = self.get(name)
        if value is None:
            if required:
                raise ModelSpecError(
                    "required field is missing from config.json; the file is incomplete or not a "
                    "Hugging Face transformers config", path=self.path, field=name)
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (isinstance(value, float) and not value.is_integer()):  # inf, nan, 2.5
            raise ModelSpecError(f"expected an integer, got {value!r}", path=self.path, field=name)
        if value < 0:
            raise ModelSpecError(f"must not be negative, got {value}", path=self.path, field=name)
        return int(value)

    def req(self, name: str) -> int:
        value = self.integer(name)
        assert value is not None
        return value


def spec_from_config(
    config: Mapping[str, Any],
    *,
    model_id: str,
    source: str = "",
    config_path: str | None = None,
    preprocessor: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """Build a spec (without weight bytes) from a parsed config.json.

    An architecture kvpilot has no rule for is read with the generic decoder model
    (``architecture_known`` False, a note saying so); ``preprocessor`` is the parsed
    ``preprocessor_config.json`` of a vision-language checkpoint (largest image size).

    Raises:
        ModelSpecError: no architecture named, or a missing or malformed field that a term
            needs (the error names it).
    """
    where = config_path or source or model_id
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise ModelSpecError(
            "config.json names no architecture; it must list the model class, e.g. "
            '"architectures": ["LlamaForCausalLM"]',
            path=where,
            field="architectures",
        )
    arch = archs[0]
    known = arch in SUPPORTED_ARCHITECTURES
    notes: list[str] = []
    if not known:
        notes.append(
            f"{UNKNOWN_ARCHITECTURE_NOTE}: kvpilot has no rule for {arch}; the generic decoder "
            "model was used (attention, layer kinds, MoE and MLA as config.json states them)"
        )
    text = text_config_of(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if arch == "LlavaForConditionalGeneration" and model_type == "llama":
        missing = [k for k in _LLAVA_LLAMA_DEFAULTS if text.get(k) is None]
        text = {**text, **{k: _LLAVA_LLAMA_DEFAULTS[k] for k in missing}}
        if missing:
            notes.append(
                f"config.json's text_config omits {', '.join(missing)}; LlamaConfig defaults "
                "of transformers were used"
            )
    f = _Fields(text, model_type, where)

    n_layers = f.req("num_hidden_layers")
    hidden = f.req("hidden_size")
    n_heads = f.req("num_attention_heads")
    if n_layers == 0 or hidden == 0 or n_heads == 0:
        raise ModelSpecError(
            "num_hidden_layers, hidden_size and num_attention_heads must be positive", path=where
        )
    if n_layers > MAX_LAYERS:
        raise ModelSpecError(
            f"num_hidden_layers is {n_layers:,}, more than any model has (at most "
            f"{MAX_LAYERS:,} are read); fix config.json",
            path=where,
        )
    n_kv = _kv_heads(text, n_heads, where)
    head_dim = f.integer("head_dim", required=False)
    vocab = f.req("vocab_size")
    intermediate = f.integer("intermediate_size", required=False)

    mla = None
    if text.get("kv_lora_rank") is not None:
        mla = MLA(kv_lora_rank=f.req("kv_lora_rank"), qk_rope_head_dim=f.req("qk_rope_head_dim"))
        nope = f.integer("qk_nope_head_dim", required=False) or 0
        head_dim = nope + mla.qk_rope_head_dim if nope else head_dim
    if head_dim is None:
        head_dim = hidden // n_heads

    moe = _moe(f)
    if moe is None and intermediate is None:
        raise ModelSpecError(
            "required field is missing from config.json (dense model without intermediate_size)",
            path=where,
            field="intermediate_size",
        )

    max_len, rope_factor = _max_len_and_rope(text, model_type, where)
    layer_types, window = _layer_types(text, model_type, n_layers, max_len, where, notes)
    quant = parse_quantization(config.get("quantization_config"), where)

    dtype = text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype")
    if not isinstance(dtype, str):
        dtype = "bfloat16"
        notes.append("config.json gives no torch_dtype; vLLM's bfloat16 assumed")
    tie = f.get("tie_word_embeddings")
    if f.defaulted:
        notes.append(
            f"config.json omits {', '.join(f.defaulted)}; the {model_type} defaults of "
            "transformers were used"
        )
    multimodal = arch in _MULTIMODAL_ARCHITECTURES or any(
        isinstance(config.get(k), dict) for k in ("vision_config", "audio_config")
    )
    vision = vision_spec_from_config(
        config, arch, text_hidden_size=hidden, text_config=text, preprocessor=preprocessor,
        where=where,
    )
    if multimodal and vision is None:
        notes.append(
            "multimodal checkpoint whose encoder kvpilot has no rule for: its profile run is "
            "not in the plan"
        )
    if vision is not None and vision.cross_attention_layers:
        notes.append(
            f"{len(vision.cross_attention_layers)} of the {n_layers} decoder layers are "
            "cross-attention layers; vLLM's V0 engine keeps their KV (the image's "
            f"{vision.max_image_tokens:,} encoder tokens per request) in the same block pool"
        )
    return ModelSpec(
        model_id=model_id,
        architecture=arch,
        model_type=model_type,
        num_hidden_layers=n_layers,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_attention_heads=n_heads,
        num_key_value_heads=n_kv,
        head_dim=head_dim,
        vocab_size=vocab,
        max_position_embeddings=max_len,
        torch_dtype=str(dtype).removeprefix("torch."),
        rope_scaling_factor=rope_factor,
        tie_word_embeddings=bool(tie) if tie is not None else False,
        layer_types=layer_types,
        sliding_window=window,
        mla=mla,
        moe=moe,
        quantization=quant,
        weights_bytes=None,
        weights_source=SOURCE_FILE if config_path else SOURCE_ESTIMATE,
        is_multimodal=multimodal,
        vision=vision,
        architecture_known=known,
        source=source,
        notes=tuple(notes),
        linear_state=linear_state_from_config(text, model_type, layer_types, where),
        global_head_dim=f.integer("global_head_dim", required=False),
        global_kv_heads=(
            f.integer("num_global_key_value_heads", required=False)
            if text.get("attention_k_eq_v") else None
        ),
        kv_shared_layers=f.integer("num_kv_shared_layers", required=False) or 0,
        mtp_layers=_mtp_layers(text),
        tower_weights_bytes=2 * (tower_params(config) if vision is None
                                 else gemma4_audio_params(config)),
        rope_cache_bytes=model_rope_bytes(text, model_type, head_dim, max_len, layer_types,
                                          mla.qk_rope_head_dim if mla else None),
    )


def _mtp_layers(text: Mapping[str, Any]) -> int:
    """MTP layers a config declares (0: none, or not a whole number)."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _kv_heads(text: Mapping[str, Any], n_heads: int, where: str) -> int:
    """KV heads as vLLM finds them (ChatGLM multi-query groups; MHA when absent)."""
    if text.get("multi_query_attention") and text.get("multi_query_group_num") is not None:
        value = text["multi_query_group_num"]
    else:
        value = next(
            (
                text[k]
                for k in ("num_key_value_heads", "n_head_kv", "num_kv_heads")
                if text.get(k) is not None
            ),
            n_heads,
        )
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelSpecError(
            f"expected a positive integer, got {value!r}", path=where, field="num_key_value_heads"
        )
    return value


def _moe(f: _Fields) -> MoE | None:
    experts = None
    for key in ("num_experts", "num_local_experts", "n_routed_experts"):
        experts = f.integer(key, required=False)
        if experts:
            break
    if not experts:
        return None
    per_tok = (
        f.integer("num_experts_per_tok", required=False)
        or f.integer("top_k_experts", required=False)  # Gemma 4
        or f.integer("top_k", required=False)
    )
    if not per_tok:
        raise ModelSpecError(
            "MoE config without num_experts_per_tok", path=f.path, field="num_experts_per_tok"
        )
    moe_inter = f.integer("moe_intermediate_size", required=False)
    shared = f.integer("n_shared_experts", required=False) or 0
    shared_inter = f.integer("shared_expert_intermediate_size", required=False) or f.integer(
        "moe_shared_expert_intermediate_size", required=False)
    if not shared and shared_inter and moe_inter:
        shared = max(1, round(shared_inter / moe_inter))  # Qwen3-Next / 3.5: one shared expert
    return MoE(
        num_experts=experts,
        num_experts_per_tok=per_tok,
        moe_intermediate_size=moe_inter,
        num_shared_experts=shared,
    )


def _max_len_and_rope(text: Mapping[str, Any], model_type: str, where: str) -> tuple[int, float]:
    """(smallest max-length key, factor vLLM multiplies into the derived max_model_len)."""
    lengths = [
        int(text[k])
        for k in _MAX_LEN_KEYS
        if isinstance(text.get(k), (int, float)) and not isinstance(text.get(k), bool)
    ]
    if not lengths:
        default = _MODEL_TYPE_DEFAULTS.get(model_type, {}).get("max_position_embeddings")
        if default is None:
            raise ModelSpecError(
                "required field is missing from config.json (no max_position_embeddings or "
                "equivalent length key)",
                path=where,
                field="max_position_embeddings",
            )
        lengths = [int(default)]
    max_len = min(lengths)
    rope = text.get("rope_scaling")
    if rope is None:
        rope = text.get("rope_parameters")
        if isinstance(rope, dict) and isinstance(rope.get(FULL_ATTENTION), dict):
            rope = rope[FULL_ATTENTION]
    if not isinstance(rope, dict) or "gemma3" in model_type:
        return max_len, 1.0
    rope_type = str(rope.get("rope_type") or rope.get("type") or "default")
    if rope_type in _ROPE_TYPES_NOT_EXTENDING:
        return max_len, 1.0
    factor = rope.get("factor", 1.0)
    if not isinstance(factor, (int, float)) or factor <= 0:
        raise ModelSpecError(
            f"rope factor must be a positive number, got {factor!r}",
            path=where,
            field="rope_scaling.factor",
        )
    derived = float(max_len)
    if rope_type == "yarn":
        original = rope.get("original_max_position_embeddings")
        if not isinstance(original, (int, float)):
            raise ModelSpecError(
                "yarn rope scaling needs original_max_position_embeddings",
                path=where,
                field="rope_scaling.original_max_position_embeddings",
            )
        derived = float(original)
    target = int(derived * float(factor))
    ratio = target / max_len
    if int(max_len * ratio) != target:  # float rounding: nudge so the product truncates right
        ratio = (target + 0.5) / max_len
    return max_len, ratio


def _layer_types(
    text: Mapping[str, Any],
    model_type: str,
    n_layers: int,
    max_len: int,
    where: str,
    notes: list[str],
) -> tuple[tuple[str, ...], int | None]:
    """Kind of every layer and the sliding window (None when no layer slides)."""
    window_raw = text.get("sliding_window")
    if window_raw is None:
        window_raw = _MODEL_TYPE_DEFAULTS.get(model_type, {}).get("sliding_window")
    window = int(window_raw) if isinstance(window_raw, (int, float)) and window_raw > 0 else None

    explicit = text.get("layer_types")
    pattern_text = text.get("hybrid_override_pattern")
    chunk = text.get("attention_chunk_size")
    if isinstance(pattern_text, str) and pattern_text:
        unknown = sorted(set(pattern_text) - set(_HYBRID_PATTERN_KINDS))
        if unknown:
            raise ModelSpecError(
                f"hybrid_override_pattern has unknown layer letters {unknown} (known: M * - E)",
                path=where, field="hybrid_override_pattern",
            )
        kinds = [_HYBRID_PATTERN_KINDS[c] for c in pattern_text]
    elif model_type.startswith("llama4") and isinstance(chunk, int) and chunk > 0:
        # vLLM's llama4.py: RoPE layers use chunked local attention (a window of one chunk),
        # the NoPE layers (no_rope_layers[i] == 0) attend globally
        nope = text.get("no_rope_layers")
        interval = text.get("no_rope_layer_interval") or 4  # transformers' Llama4TextConfig
        flags = nope if isinstance(nope, list) and len(nope) == n_layers else [
            int((i + 1) % int(interval) != 0) for i in range(n_layers)]
        kinds = [SLIDING_ATTENTION if flag else FULL_ATTENTION for flag in flags]
        window = chunk
        notes.append(
            f"chunked local attention ({chunk:,}-token chunks) is planned as a window of one "
            "chunk"
        )
    elif (text.get("full_attention_interval") and not isinstance(explicit, list)
          and model_type.startswith(("qwen3_next", "qwen3_5"))):
        # Qwen3-Next / 3.5 without layer_types: every interval-th layer is full attention
        step = int(text["full_attention_interval"])
        kinds = [
            FULL_ATTENTION if (i + 1) % step == 0 else LINEAR_ATTENTION for i in range(n_layers)
        ]
    elif text.get("use_sliding_window") is False:
        # Qwen2/Qwen3: a window may be written into the config but is switched off
        kinds = [FULL_ATTENTION] * n_layers
        if isinstance(explicit, list):
            parsed = [_layer_kind(v, where) for v in explicit]
            kinds = [k if k == LINEAR_ATTENTION else FULL_ATTENTION for k in parsed]
    elif isinstance(explicit, list):
        kinds = [_layer_kind(v, where) for v in explicit]
    elif window is None:
        kinds = [FULL_ATTENTION] * n_layers
    elif model_type.startswith("gemma3") or text.get("sliding_window_pattern"):
        pattern = text.get("sliding_window_pattern") or _GEMMA3_PATTERN
        if not isinstance(pattern, int) or pattern <= 0:
            raise ModelSpecError(
                f"expected a positive integer, got {pattern!r}",
                path=where,
                field="sliding_window_pattern",
            )
        step = pattern
        kinds = [
            FULL_ATTENTION if (i + 1) % step == 0 else SLIDING_ATTENTION for i in range(n_layers)
        ]
    elif model_type in ("gemma2", "gpt_oss", "cohere2"):
        kinds = [SLIDING_ATTENTION if i % 2 == 0 else FULL_ATTENTION for i in range(n_layers)]
    elif text.get("use_sliding_window") and text.get("max_window_layers") is not None:
        first = int(text["max_window_layers"])
        kinds = [SLIDING_ATTENTION if i >= first else FULL_ATTENTION for i in range(n_layers)]
    else:
        kinds = [SLIDING_ATTENTION] * n_layers  # Mistral 7B v0.1 style: every layer slides

    if len(kinds) != n_layers:
        raise ModelSpecError(
            f"layer_types lists {len(kinds)} layers but num_hidden_layers is {n_layers}",
            path=where,
            field="layer_types",
        )
    if SLIDING_ATTENTION in kinds:
        if window is None:
            raise ModelSpecError(
                "sliding layers but no sliding_window size", path=where, field="sliding_window"
            )
        if window >= max_len:
            notes.append(
                f"sliding_window {window} >= max length {max_len}: treated as full attention"
            )
            kinds = [FULL_ATTENTION if k == SLIDING_ATTENTION else k for k in kinds]
    if SLIDING_ATTENTION not in kinds:
        window = None
    if all(k == FULL_ATTENTION for k in kinds):
        return (), None
    if all(k in (LINEAR_ATTENTION, NO_CACHE) for k in kinds):
        raise ModelSpecError(
            "no attention layer in the config (a pure state-space model); kvpilot sizes hybrid "
            "models with at least one attention layer", path=where, field="layer_types",
        )
    return tuple(kinds), window


def _layer_kind(value: Any, where: str) -> str:
    kind = _LAYER_TYPE_VALUES.get(str(value))
    if kind is None:
        raise ModelSpecError(
            f"unknown layer type {value!r} (known: {', '.join(sorted(_LAYER_TYPE_VALUES))})",
            path=where,
            field="layer_types",
        )
    return kind


def parse_quantization(qcfg: Any, where: str = "") -> Quantization | None:
    """``quantization_config`` -> :class:`Quantization` with vLLM's method names, the modules
    the checkpoint leaves unquantized and a mixed checkpoint's per-module algorithms.

    Raises:
        ModelSpecError: the section is not an object or has no ``quant_method``.
    """
    quant, ignore, mixed = _method_of(qcfg, where), ignore_from_config(qcfg), mixed_from_config(
        qcfg)
    return replace(quant, ignore=ignore, mixed=mixed) if quant and (ignore or mixed) else quant


def _method_of(qcfg: Any, where: str) -> Quantization | None:
    if qcfg is None:
        return None
    if not isinstance(qcfg, dict):
        raise ModelSpecError("must be an object", path=where, field="quantization_config")
    method = qcfg.get("quant_method")
    if method is None and ("bits" in qcfg or "w_bit" in qcfg):
        method = "gptq"  # quantize_config.json of AutoGPTQ carries no method name
    if not isinstance(method, str):
        raise ModelSpecError(
            "no quant_method; vLLM cannot tell how the weights are stored",
            path=where,
            field="quantization_config.quant_method",
        )
    method = method.lower()
    if method == "compressed_tensors":
        method = "compressed-tensors"

    def as_int(*keys: str) -> int | None:
        for k in keys:
            v = qcfg.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    if method in ("awq", "gptq"):
        return Quantization(method, as_int("bits", "w_bit"), as_int("group_size", "q_group_size"))
    if method == "fp8":
        return Quantization("fp8", 8, None)
    if method == "mxfp4":
        return Quantization("mxfp4", 4, 32)
    if method == "bitsandbytes":
        bits = 4 if qcfg.get("load_in_4bit") else 8 if qcfg.get("load_in_8bit") else None
        return Quantization("bitsandbytes", bits, None)
    if method == "compressed-tensors":
        return _compressed_tensors(qcfg, where)
    if method == "modelopt":  # NVIDIA ModelOpt: the algorithm says the format
        algo = str(qcfg.get("quant_algo") or "").upper()
        if "FP4" in algo:  # vLLM's modelopt_fp4: FP4 values, one FP8 scale per 16
            return Quantization("modelopt_fp4", 4, 16)
        if "FP8" in algo:
            return Quantization("modelopt", 8, None)
    return Quantization(method, as_int("bits", "w_bit", "weight_bits"), as_int("group_size"))


def _compressed_tensors(qcfg: Mapping[str, Any], where: str) -> Quantization:
    groups = qcfg.get("config_groups")
    bits: list[int] = []
    group_sizes: list[int | None] = []
    if isinstance(groups, dict):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, dict) else None
            if not isinstance(weights, dict):
                continue
            nb = weights.get("num_bits")
            if isinstance(nb, int):
                bits.append(nb)
            strategy = weights.get("strategy")
            gs = weights.get("group_size")
            if strategy in ("group", "tensor_group") and isinstance(gs, int):  # NVFP4: 16
                group_sizes.append(gs)
            elif strategy == "channel":
                group_sizes.append(-1)
            else:
                group_sizes.append(None)
    if not bits:
        raise ModelSpecError(
            "compressed-tensors config without weights.num_bits in config_groups",
            path=where,
            field="quantization_config.config_groups",
        )
    return Quantization("compressed-tensors", min(bits), group_sizes[0] if group_sizes else None)
