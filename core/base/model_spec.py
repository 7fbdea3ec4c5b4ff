"""What the fit engine needs to know about a model, wherever the facts come from.

A :class:`ModelSpec` is built by :mod:`.local` (config.json + safetensors headers), :mod:`.hub`
(Hugging Face cache or Hub metadata) or :mod:`.catalog` (bundled facts with sources). It is a
plain frozen record: no I/O, no defaults guessed here. Sizes are in bytes, counts are integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvpilot.core.base.quant_ignore import QuantIgnore
from kvpilot.core.base.quant_mixed import MixedPrecision

#: layer kinds understood by the fit engine (values of ``ModelSpec.layer_types``)
FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
LINEAR_ATTENTION = "linear_attention"  # Mamba / GDN style state layers (no per-token KV)
NO_CACHE = "no_cache"  # layers without attention or state (Nemotron-H MLP / MoE-only layers)

#: recurrent-state families of linear-attention layers (vLLM's MambaStateShapeCalculator)
GATED_DELTA_NET = "gated_delta_net"  # Qwen3-Next, Qwen3.5 / 3.6
MAMBA2 = "mamba2"  # Nemotron-H, Granite 4 hybrid

#: where a number came from, for the "why" of every figure in the GUI
SOURCE_FILE = "file"  # measured from files on disk (config.json, safetensors headers)
SOURCE_INDEX = "index"  # model.safetensors.index.json metadata.total_size
SOURCE_HUB = "hub"  # Hugging Face Hub metadata (online)
SOURCE_CATALOG = "catalog"  # bundled resources/catalog.json (facts with sources)
SOURCE_ESTIMATE = "estimate"  # computed from the architecture (no file seen)

#: the mark of every figure planned with the generic decoder model (an architecture kvpilot
#: has no rule for)
UNKNOWN_ARCHITECTURE_NOTE = "estimated (unknown architecture)"


@dataclass(frozen=True)
class Quantization:
    """How the checkpoint's weights are stored.

    ``method`` uses vLLM's names (``awq``, ``gptq``, ``fp8``, ``compressed-tensors``, ``mxfp4``,
    ``bitsandbytes``...). ``bits`` is the weight width (4, 8); ``group_size`` the quantization
    group (128 typical, -1 per channel). ``cli_flag_needed`` is True only when vLLM cannot infer
    the method from the checkpoint's own ``quantization_config`` (never for HF checkpoints).
    ``ignore`` lists the modules the checkpoint keeps in its own dtype (None: every projection
    is quantized). ``mixed`` gives each module's own algorithm in a ModelOpt MIXED_PRECISION
    checkpoint (None: one scheme for all).
    """

    method: str
    bits: int | None = None
    group_size: int | None = None
    cli_flag_needed: bool = False
    ignore: QuantIgnore | None = None
    mixed: MixedPrecision | None = None


@dataclass(frozen=True)
class MoE:
    """Mixture-of-experts shape (only what memory depends on)."""

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int | None = None
    num_shared_experts: int = 0


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek V2/V3 style): one latent vector per token and layer."""

    kv_lora_rank: int
    qk_rope_head_dim: int


@dataclass(frozen=True)
class LinearState:
    """The per-sequence state of one linear-attention layer, as vLLM's ``MambaSpec`` sizes it.

    Two tensors per layer and sequence (``mamba_utils.MambaStateShapeCalculator``): a
    convolution state of ``conv_dim x (conv_kernel - 1)`` values in the model dtype and a
    temporal (SSM) state of ``temporal_heads x temporal_head_dim x temporal_state_dim`` values in
    ``ssm_dtype`` (None: the model dtype). ``conv_dim`` and ``temporal_heads`` are split over
    tensor-parallel ranks.

    Attributes:
        family: :data:`GATED_DELTA_NET` or :data:`MAMBA2`.
        conv_dim: channels of the convolution state (whole model, before the TP split).
        conv_kernel: convolution width (the state keeps ``conv_kernel - 1`` steps).
        temporal_heads, temporal_head_dim, temporal_state_dim: shape of the SSM state.
        ssm_dtype: dtype name of the SSM state (``float32`` where the config or vLLM sets it).
        n_groups: Mamba2 B/C groups (vLLM widens them to a multiple of the TP size).
        state_size: Mamba2 ``ssm_state_size`` (sizes the extra groups' conv channels).
        chunk_size: Mamba2 scan chunk (``chunk_size``; 0 when the config has none).
    """

    family: str
    conv_dim: int
    conv_kernel: int
    temporal_heads: int
    temporal_head_dim: int
    temporal_state_dim: int
    ssm_dtype: str | None = None
    n_groups: int = 0
    state_size: int = 0
    chunk_size: int = 0

    def page_bytes(self, model_elem_bytes: int, ssm_elem_bytes: int, tp: int = 1) -> int:
        """Bytes of one sequence's state in one layer on one rank (before page padding)."""
        conv_dim = self.conv_dim
        if self.family == MAMBA2 and self.n_groups and tp > 1 and self.n_groups % tp:
            extra = tp - self.n_groups  # vLLM's extra_groups_for_head_shards for n_groups < tp
            conv_dim += 2 * max(0, extra) * self.state_size
        conv = conv_dim // tp * (self.conv_kernel - 1) * model_elem_bytes
        temporal = (self.temporal_heads // tp * self.temporal_head_dim
                    * self.temporal_state_dim * ssm_elem_bytes)
        return conv + temporal


@dataclass(frozen=True)
class VisionSpec:
    """The vision encoder of a vision-language checkpoint, as vLLM profiles it.

    Built by :func:`kvpilot.core.models.vision.vision_spec_from_config` from ``vision_config``
    (and ``preprocessor_config.json`` where the image size is set there).

    Attributes:
        family: kvpilot's rule set (``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``gemma3``,
            ``mistral3``, ``llava``, ``mllama``).
        hidden_size, intermediate_size, num_layers, num_heads: widths of the encoder.
        patch_size: pixels per patch edge.
        max_image_tokens: language-model tokens one image takes at the largest size vLLM's dummy
            input uses (what the encoder budget counts).
        max_image_patches: encoder positions of one such image (before any merge or pooling).
        params: parameters of the vision tower and projector (kept 16-bit in every checkpoint
            kvpilot knows).
        text_hidden_size: width of the encoder's output embeddings (the text model's hidden).
        supports_video: the processor also takes videos (vLLM profiles the larger modality).
        tower_skippable_since: first vLLM release that does not build the tower when every
            modality's ``--limit-mm-per-prompt`` is 0 (None: the tower is always loaded).
        cross_attention_layers: decoder layers that attend to the image (Mllama).
        last_vllm_release: the newest vLLM release that serves the architecture (None: all).
    """

    family: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    patch_size: int
    max_image_tokens: int
    max_image_patches: int
    params: int
    text_hidden_size: int
    supports_video: bool = False
    tower_skippable_since: tuple[int, ...] | None = None
    cross_attention_layers: tuple[int, ...] = ()
    last_vllm_release: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ModelSpec:
    """A language model as the fit engine sees it.

    Attributes:
        model_id: what the user named (local path, repo id or catalog id).
        architecture: first entry of ``architectures`` in config.json, e.g. ``LlamaForCausalLM``.
        model_type: ``model_type`` of the text model (``llama``, ``qwen2``, ``gemma3_text``...).
        num_hidden_layers: decoder layers of the text model.
        hidden_size, intermediate_size: widths of the text model (intermediate may be None for
            pure-MoE models; see ``moe``).
        num_attention_heads, num_key_value_heads, head_dim: attention shape; ``head_dim`` is
            resolved (explicit ``head_dim`` or hidden_size // num_attention_heads).
        vocab_size: rows of the embedding and of the logits.
        max_position_embeddings: the longest context the config allows (vLLM's derived
            max_model_len before any rope scaling factor is applied, see ``rope_scaling_factor``).
        rope_scaling_factor: multiplier vLLM applies to the derived length (1.0 when none or when
            the rope type does not extend it).
        torch_dtype: checkpoint dtype name (``bfloat16``, ``float16``, ``float32``).
        tie_word_embeddings: the lm_head shares the embedding matrix.
        layer_types: one entry per layer, values ``full_attention`` / ``sliding_attention`` /
            ``linear_attention``.
        sliding_window: window in tokens for sliding layers (None when there are none).
        mla: latent-attention shape (None for ordinary attention).
        moe: expert shape (None for dense models).
        quantization: checkpoint quantization (None for 16-bit checkpoints).
        weights_bytes: exact bytes of all weight tensors in the checkpoint (None if unknown).
        weights_source: one of the SOURCE_* constants, saying where ``weights_bytes`` came from.
        is_multimodal: the checkpoint carries a vision/audio encoder (vLLM profiles it too).
        vision: the vision encoder's shape (None for text models and for multimodal
            checkpoints whose encoder kvpilot has no rule for).
        architecture_known: False when kvpilot has no rule for ``architecture`` and the spec
            follows the generic decoder model (every figure is then an estimate).
        source: where the spec was read (path, ``hub:repo@rev``, ``catalog:id``).
        notes: free-form caveats (unverified values, assumptions) to show the user.
        linear_state: the recurrent state of the ``linear_attention`` layers (None: none).
        global_head_dim, global_kv_heads: head size and KV heads of the full-attention layers
            where they differ from the sliding ones (Gemma 4; None: the same).
        kv_shared_layers: the last N layers reuse an earlier layer's KV and allocate none
            (Gemma 4 E2B / E4B ``num_kv_shared_layers``).
        tower_weights_bytes: 16-bit bytes of encoder towers kvpilot sizes from their config
            sections without a :class:`VisionSpec` (Gemma 4's vision and audio towers), which
            vLLM does not build when every modality's limit is 0 (``--language-model-only``).
        mtp_weights_bytes: bytes of the checkpoint's MTP tensors that ``weights_bytes`` leaves
            out because vLLM loads them only with MTP speculative decoding (0: none, or not
            read from the checkpoint's files).
        mtp_shared_copy_bytes: the part of ``mtp_weights_bytes`` that copies the embedding and
            output head, which the MTP drafter drops for the target's after loading.
        rope_cache_bytes: bytes of the RoPE cos/sin tables vLLM builds at load, per GPU (they
            are buffers, in no checkpoint file; :mod:`kvpilot.core.models.rope_cache`).
    """

    model_id: str
    architecture: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int | None
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    torch_dtype: str = "bfloat16"
    rope_scaling_factor: float = 1.0
    tie_word_embeddings: bool = False
    layer_types: tuple[str, ...] = ()
    sliding_window: int | None = None
    mla: MLA | None = None
    moe: MoE | None = None
    quantization: Quantization | None = None
    weights_bytes: int | None = None
    weights_source: str = SOURCE_ESTIMATE
    is_multimodal: bool = False
    vision: VisionSpec | None = None
    architecture_known: bool = True
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    linear_state: LinearState | None = None
    global_head_dim: int | None = None
    global_kv_heads: int | None = None
    kv_shared_layers: int = 0
    #: multi-token-prediction layers in the checkpoint (``num_nextn_predict_layers`` or
    #: ``mtp_num_hidden_layers``): what ``--speculative-config '{"method": "mtp"}'`` loads
    mtp_layers: int = 0
    mtp_weights_bytes: int = 0
    mtp_shared_copy_bytes: int = 0
    tower_weights_bytes: int = 0
    rope_cache_bytes: int = 0

    @property
    def resolved_layer_types(self) -> tuple[str, ...]:
        """``layer_types`` or, when the config has none, every layer full attention."""
        if self.layer_types:
            return self.layer_types
        return (FULL_ATTENTION,) * self.num_hidden_layers

    @property
    def derived_max_model_len(self) -> int:
        """The max_model_len vLLM derives from the config (before any user override)."""
        return int(self.max_position_embeddings * self.rope_scaling_factor)
