"""KV-cache arithmetic as vLLM's V1 engine does it: page sizes, groups, blocks, tokens.

Per layer and token, ordinary attention stores K and V for every KV head:
``2 x num_kv_heads (per tensor-parallel rank) x head_dim x dtype_bytes``. Multi-head latent
attention (DeepSeek style) stores one latent vector of ``kv_lora_rank + qk_rope_head_dim``
values and no separate V. Layers with a sliding window only ever hold about
``window - 1 + in-flight tokens`` of a request. Linear-attention (Mamba / Gated DeltaNet) layers
keep a fixed state per sequence, stored in blocks of the same pool (one block per sequence and
linear group, its page padded to the attention page; see :func:`kv_layout`).

Hybrid models (Gemma 2/3, gpt-oss) put their layers into *groups* of equal size, one per
attention type, sharing a single block pool: a block then costs ``page_bytes x group_size`` and a
request consumes blocks in every group. This module reproduces that bookkeeping
(``vllm/v1/core/kv_cache_utils.py`` and ``kv_cache_interface.py``, see reference §4.3 and §4.5).

All sizes are bytes; token counts are integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvpilot.core.base import versions
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.model_spec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    ModelSpec,
)
from kvpilot.core.fit import kv_quant

#: vLLM's kernel block alignment for the attention backends of CUDA GPUs (tokens)
KERNEL_BLOCK_ALIGNMENT = 16

#: model types whose vLLM model class supports Mamba prefix caching ('all' mode when prefix
#: caching is on; the others fall back to 'align'): SupportsMambaPrefixCaching in vLLM 0.21
MAMBA_PREFIX_CACHING_TYPES = frozenset({"nemotron_h", "granitemoehybrid"})

#: vLLM's default block size on CUDA attention backends (tokens per block)
DEFAULT_BLOCK_SIZE = 16

_DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
}

#: KV-cache dtypes that store one byte per value
FP8_KV_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_per_token_head"})


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name (``bfloat16`` -> 2).

    Raises:
        FitError: for a dtype name kvpilot does not know.
    """
    key = name.lower().replace("torch.", "")
    if key in _DTYPE_BYTES:
        return _DTYPE_BYTES[key]
    if key in FP8_KV_DTYPES or key.startswith("fp8"):
        return 1
    raise FitError(f"unknown dtype '{name}': use bfloat16, float16, float32 or fp8")


def kv_dtype_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per stored K/V value: ``auto`` follows the model's activation dtype.

    A float32 checkpoint served with ``--dtype auto`` runs in float16 on GPUs; callers that serve
    in float32 (the CPU engine) pass ``model_dtype='float32'`` explicitly.
    """
    kv = kv_cache_dtype.lower()
    if kv in ("auto", ""):
        return dtype_bytes(serving_dtype(model_dtype))
    if kv_quant.is_packed(kv):
        return 1  # uint8 / int8 storage; kv_quant.head_bytes sizes the packed page
    return dtype_bytes(kv)


def serving_dtype(checkpoint_dtype: str) -> str:
    """The dtype vLLM runs a checkpoint in with ``--dtype auto``.

    "auto will use FP16 precision for FP32 and FP16 models, and BF16 precision for BF16 models"
    (vLLM's help text); a float32 checkpoint therefore serves in 16 bits.
    """
    key = (checkpoint_dtype or "bfloat16").lower().replace("torch.", "")
    if key in ("float32", "float", "fp32"):
        return "float16"
    return key


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group: ``num_layers`` layers of the same attention kind sharing blocks."""

    kind: str  # full_attention | sliding_attention | linear_attention
    num_layers: int
    sliding_window: int | None
    block_tokens: int | None = None  # tokens per block where page unification raised it


@dataclass(frozen=True)
class KvLayout:
    """How a model's KV cache is laid out per tensor-parallel rank.

    Attributes:
        bytes_per_token_per_layer: K+V bytes one token occupies in one attention layer.
        kv_bytes_per_token: sum over all attention layers (what the seed articles call the KV
            bytes per token: ``2 x layers x kv_heads x head_dim x bytes`` for full attention).
        block_size: tokens per block.
        page_bytes: bytes of one block in one layer (``bytes_per_token_per_layer x block_size``).
        group_size: layers per group (the block pool's page is ``page_bytes x group_size``).
        groups: the groups, in vLLM's order (full attention first).
        bytes_per_block: what one block of the shared pool costs across all its tensors.
    """

    bytes_per_token_per_layer: int
    kv_bytes_per_token: int
    block_size: int
    page_bytes: int
    group_size: int
    groups: tuple[KvGroup, ...]
    state_bytes_per_sequence: int = 0
    state_page_bytes: int = 0
    state_blocks_per_request: int = 1
    state_blocks_follow_length: bool = False  # vLLM's 'all' mode: one state block per block
    #: bytes a drafter's attention layers add to each block (speculative decoding: MTP
    #: layers, an EAGLE head, a draft model; see :func:`with_draft_layers`)
    draft_bytes_per_block: int = 0

    @property
    def bytes_per_block(self) -> int:
        return self.page_bytes * self.group_size + self.draft_bytes_per_block

    @property
    def is_hybrid(self) -> bool:
        return any(g.kind != FULL_ATTENTION for g in self.groups)

    def blocks_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """Blocks one request of ``max_model_len`` tokens needs, summed over groups.

        ``in_flight_tokens`` is how many tokens the scheduler may add in one step beyond the
        window (vLLM: max_num_batched_tokens, doubled from the versions with async scheduling).
        """
        total = 0
        for group in self.groups:
            block = group.block_tokens or self.block_size
            if group.kind == LINEAR_ATTENTION:
                total += (math.ceil(max_model_len / block) if self.state_blocks_follow_length
                          else self.state_blocks_per_request)
            elif group.kind == SLIDING_ATTENTION and group.sliding_window:
                tokens = min(group.sliding_window - 1 + in_flight_tokens, max_model_len)
                total += math.ceil(tokens / block) + 1
            else:
                total += math.ceil(max_model_len / block)
        return total

    @property
    def has_state_layers(self) -> bool:
        """Linear-attention (Mamba / GDN) layers share the block pool."""
        return any(g.kind == LINEAR_ATTENTION for g in self.groups)

    def kv_bytes_per_request(self, max_model_len: int, in_flight_tokens: int) -> int:
        """Bytes of KV one full-length request pins (what vLLM calls the needed memory)."""
        return self.blocks_per_request(max_model_len, in_flight_tokens) * self.bytes_per_block


def kv_heads_per_rank(model: ModelSpec, tensor_parallel_size: int) -> int:
    """KV heads held by one tensor-parallel rank (replicated when fewer heads than ranks)."""
    if tensor_parallel_size < 1:
        raise FitError("tensor_parallel_size must be at least 1")
    return max(1, model.num_key_value_heads // tensor_parallel_size)


def bytes_per_token_per_layer(
    model: ModelSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1,
    model_dtype: str | None = None,
) -> int:
    """K+V bytes for one token in one attention layer on one rank.

    Raises:
        FitError: unknown dtype or a model without attention heads.
    """
    elem = kv_dtype_bytes(kv_cache_dtype, model_dtype or model.torch_dtype)
    if model.mla is not None:
        # one latent (compressed KV) plus the decoupled rope key, no V; not sharded by TP
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * elem
    if model.num_key_value_heads <= 0 or model.head_dim <= 0:
        raise FitError(f"{model.model_id}: the model has no attention heads to size a KV cache")
    return kv_heads_per_rank(model, tensor_parallel_size) * kv_quant.head_bytes(
        kv_cache_dtype, model.head_dim, elem)


def _layer_bytes(
    model: ModelSpec, kind: str, elem: int, tensor_parallel_size: int,
    kv_cache_dtype: str = "auto",
) -> int:
    """K+V bytes per token of one layer of ``kind`` (Gemma 4's full layers differ)."""
    if kind == FULL_ATTENTION and (model.global_head_dim or model.global_kv_heads):
        heads = max(1, (model.global_kv_heads or model.num_key_value_heads)
                    // tensor_parallel_size)
        return heads * kv_quant.head_bytes(kv_cache_dtype, model.global_head_dim
                                           or model.head_dim, elem)
    return kv_heads_per_rank(model, tensor_parallel_size) * kv_quant.head_bytes(
        kv_cache_dtype, model.head_dim, elem)


def _cache_layers(model: ModelSpec) -> list[tuple[str, int | None]]:
    """(kind, window) of every layer that owns cache, in order: KV-shared layers (the last
    ``kv_shared_layers``) and layers without attention or state own none."""
    kinds = model.resolved_layer_types
    owning = len(kinds) - model.kv_shared_layers if model.kv_shared_layers > 0 else len(kinds)
    out: list[tuple[str, int | None]] = []
    for kind in kinds[:owning]:
        if kind not in (FULL_ATTENTION, SLIDING_ATTENTION, LINEAR_ATTENTION):
            continue
        window = model.sliding_window if kind == SLIDING_ATTENTION else None
        if kind == SLIDING_ATTENTION and not window:
            kind = FULL_ATTENTION
        out.append((kind, window))
    return out


def group_padding_ratio(vllm_version: str | None) -> float:
    """Below this ratio of the largest to the smallest kind's layer count vLLM pads groups to
    the largest count instead of splitting (0: never; ``versions.FEATURES``)."""
    if versions.supports("kv_group_padding_1_5", vllm_version):
        return 1.5
    if versions.supports("kv_group_padding_1_25", vllm_version):
        return 1.25
    return 0.0


def _group_layers(
    counts: dict[tuple[str, int | None, int | None], int], model_id: str, padding_ratio: float
) -> tuple[tuple[KvGroup, ...], int]:
    """Group layers the way vLLM's hybrid KV-cache manager does (kv_cache_utils.py
    ``_get_kv_cache_groups_uniform_page_size``): groups of the smallest kind's layer count, or
    of the largest one's where that is under ``padding_ratio`` x the smallest (padding
    instead of splits)."""
    if not counts:
        raise FitError(f"{model_id}: no attention layers; kvpilot cannot size its KV cache")
    if len(counts) == 1:
        (kind, window, tokens), n = next(iter(counts.items()))
        return (KvGroup(kind, n, window, tokens),), n
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < smallest * padding_ratio else smallest
    groups: list[KvGroup] = []
    order = {FULL_ATTENTION: 0, SLIDING_ATTENTION: 1, LINEAR_ATTENTION: 2}
    ordered = sorted(counts.items(), key=lambda item: (order[item[0][0]], item[0][1] or 0))
    for (kind, window, tokens), n in ordered:
        for _ in range(math.ceil(n / group_size)):
            groups.append(KvGroup(kind, group_size, window, tokens))
    return tuple(groups), group_size


def state_page_bytes(
    model: ModelSpec, tensor_parallel_size: int = 1, model_dtype: str | None = None,
    ssm_cache_dtype: str | None = None,
) -> int:
    """Bytes of one sequence's recurrent state in one linear-attention layer (unpadded), with
    the conv state in the model dtype and the SSM state in its own (0: no such layers).

    ``ssm_cache_dtype`` is ``--mamba-ssm-cache-dtype``: given (not "auto") it wins over the
    checkpoint's ``mamba_ssm_dtype`` (vLLM 0.29 ``MambaStateDtypeCalculator`` and the hybrid
    configs' ``verify_and_update_config``, which only fill an "auto" flag from config.json)."""
    state = model.linear_state
    if state is None:
        return 0
    elem = dtype_bytes(serving_dtype(model_dtype or model.torch_dtype))
    ssm = dtype_bytes(state.ssm_dtype) if state.ssm_dtype else elem
    if ssm_cache_dtype and ssm_cache_dtype.lower() != "auto":
        ssm = dtype_bytes(ssm_cache_dtype)
    return state.page_bytes(elem, ssm, tensor_parallel_size)


def kv_layout(
    model: ModelSpec,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    block_size: int | None = None,
    model_dtype: str | None = None,
    *,
    prefix_caching: bool = False,
    vllm_version: str | None = None,
    mamba_cache_mode: str | None = None,
    mamba_ssm_cache_dtype: str | None = None,
) -> KvLayout:
    """The KV layout of ``model`` per rank.

    Hybrid linear-attention models follow vLLM's ``_align_hybrid_block_size``: the attention
    block grows to ``16 x ceil(state / (16 x one token's K+V))`` tokens so that one attention
    page holds a layer's state, and the state page is padded to the attention page; each
    sequence then holds one state block per linear group (two with prefix caching, vLLM's
    'align' mode; one per attention block of the context in 'all' mode, the prefix-caching
    mode of the Mamba2 hybrids, whose block is a multiple of the Mamba chunk).

    ``vllm_version`` picks the release's grouping rule (None: the newest).
    ``mamba_cache_mode`` is ``--mamba-cache-mode`` (None: the model's default above): with
    prefix caching vLLM keeps "all" only for models that support it and turns "none" into
    "align"; without prefix caching every mode is "none" (``MambaModelConfig``, 0.29.0).
    ``mamba_ssm_cache_dtype``: see :func:`state_page_bytes`.

    Raises:
        FitError: unknown dtype, no attention layers, or a non-positive block size.
    """
    bs = block_size or DEFAULT_BLOCK_SIZE
    if bs <= 0:
        raise FitError("block_size must be positive")
    per_layer = bytes_per_token_per_layer(model, kv_cache_dtype, tensor_parallel_size, model_dtype)
    elem = kv_dtype_bytes(kv_cache_dtype, model_dtype or model.torch_dtype)
    layers = _cache_layers(model)
    state_unpadded = state_page_bytes(model, tensor_parallel_size, model_dtype,
                                      mamba_ssm_cache_dtype)
    all_mode = bool(prefix_caching and state_unpadded
                    and model.model_type in MAMBA_PREFIX_CACHING_TYPES
                    and versions.supports("mamba_cache_all_mode", vllm_version)
                    and mamba_cache_mode in (None, "all"))
    if state_unpadded and model.mla is None:
        align = max(KERNEL_BLOCK_ALIGNMENT, bs)
        if all_mode:
            # 'all' mode: the block is a multiple of the Mamba chunk (kernel performance)
            chunk = math.lcm(model.linear_state.chunk_size or align, align)  # type: ignore[union-attr]
            bs = max(bs, chunk * math.ceil(math.ceil(state_unpadded / per_layer) / chunk))
        else:
            bs = max(bs, align * math.ceil(state_unpadded / (align * per_layer)))
    per_kind = {
        kind: _layer_bytes(model, kind, elem, tensor_parallel_size, kv_cache_dtype)
        if model.mla is None
        else per_layer
        for kind in (FULL_ATTENTION, SLIDING_ATTENTION)
    }
    pages = {kind: per_kind[kind] * bs for kind, _ in layers if kind != LINEAR_ATTENTION}
    page = max(pages.values(), default=per_layer * bs)
    if state_unpadded > page:
        page = state_unpadded  # MLA hybrids: no alignment rule kvpilot knows; state page
    counts: dict[tuple[str, int | None, int | None], int] = {}
    for kind, window in layers:
        tokens = None
        if kind != LINEAR_ATTENTION and pages[kind] != page:
            tokens = bs * page // pages[kind]
        counts[(kind, window, tokens)] = counts.get((kind, window, tokens), 0) + 1
    groups, group_size = _group_layers(counts, model.model_id, group_padding_ratio(vllm_version))
    kv_per_token = sum(per_kind[kind] for kind, _ in layers if kind != LINEAR_ATTENTION)
    n_state = sum(1 for kind, _ in layers if kind == LINEAR_ATTENTION)
    return KvLayout(
        bytes_per_token_per_layer=per_layer,
        kv_bytes_per_token=kv_per_token,
        block_size=bs,
        page_bytes=page,
        group_size=group_size,
        groups=groups,
        state_bytes_per_sequence=state_unpadded * n_state,
        state_page_bytes=state_unpadded,
        state_blocks_per_request=2 if prefix_caching else 1,
        state_blocks_follow_length=all_mode,
    )


def with_draft_layers(layout: KvLayout, draft_kv_bytes_per_token: int) -> KvLayout:
    """``layout`` with a drafter's attention layers (``draft_kv_bytes_per_token`` bytes per
    token over all of them) in every block, as vLLM's KV-cache config holds the target's and
    the drafter's layers in one block pool. A hybrid target is approximated: the drafter's
    pages are added to every group's block."""
    if draft_kv_bytes_per_token <= 0:
        return layout
    return replace(
        layout,
        kv_bytes_per_token=layout.kv_bytes_per_token + draft_kv_bytes_per_token,
        draft_bytes_per_block=layout.draft_bytes_per_block
        + draft_kv_bytes_per_token * layout.block_size,
    )


def with_speculative_state(layout: KvLayout, num_speculative_tokens: int) -> KvLayout:
    """``layout`` with the state blocks speculative decoding adds to each request: every
    linear-attention layer's spec gets ``num_speculative_blocks = num_speculative_tokens`` and
    holds ``1 + num_speculative_blocks`` state blocks per request (2 + in 'align' mode, vLLM's
    prefix caching of hybrids): ``MambaSpec.max_memory_usage_bytes`` and the layers'
    ``get_kv_cache_spec`` (``model_executor/layers/mamba/abstract.py``) in the 0.20.0, 0.27.1,
    0.29.0 and 0.32.0 wheels, whatever the drafter. The 'all' mode (Mamba2 hybrids with
    prefix caching), one state block per attention block of the context, is left as it is:
    0.20.0 adds no draft blocks there, 0.27.1 and 0.29.0 add them too (releases between not
    read); a model without such layers is left as it is too."""
    if (num_speculative_tokens <= 0 or not layout.has_state_layers
            or layout.state_blocks_follow_length):
        return layout
    return replace(layout, state_blocks_per_request=layout.state_blocks_per_request
                   + num_speculative_tokens)


@dataclass(frozen=True)
class KvCapacity:
    """The KV part of a planned capacity: the blocks, tokens and concurrency vLLM would log
    for a KV budget (computed here; what a server reported is
    :class:`kvpilot.core.fit.measurements.ReportedCapacity`)."""

    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    blocks_per_request: int


def kv_capacity(
    layout: KvLayout,
    available_kv_bytes: int,
    max_model_len: int,
    in_flight_tokens: int,
    *,
    tokens_from_concurrency: bool = True,
) -> KvCapacity:
    """Blocks, KV tokens and maximum concurrency for a KV budget, as vLLM logs them.

    ``tokens_from_concurrency`` selects the formula of vLLM >= 0.21
    (``int(max_concurrency x max_model_len)``); 0.10.2 to 0.20 printed
    ``num_blocks // num_groups x block_size`` (the smallest group block: the attention block of
    a hybrid model); see ``versions.FEATURES['kv_tokens_from_concurrency']``.
    """
    num_blocks = max(0, available_kv_bytes) // layout.bytes_per_block
    per_request = max(1, layout.blocks_per_request(max_model_len, in_flight_tokens))
    concurrency = num_blocks / per_request
    if tokens_from_concurrency:
        tokens = int(concurrency * max_model_len)
    else:
        tokens = num_blocks // len(layout.groups) * layout.block_size
    return KvCapacity(num_blocks, tokens, concurrency, per_request)


def estimate_max_model_len(
    layout: KvLayout,
    num_blocks: int,
    upper_bound: int,
    in_flight_tokens: int,
    *,
    reserve_null_block: bool = True,
) -> int:
    """The largest max_model_len whose per-request blocks fit (vLLM's binary search).

    Returns 0 when not even one token fits. vLLM >= 0.32 keeps one block aside (the null block)
    before the check.
    """
    usable = num_blocks - (1 if reserve_null_block else 0)
    if usable <= 0:
        return 0
    lo, hi = 0, upper_bound
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.blocks_per_request(mid, in_flight_tokens) <= usable:
            lo = mid
        else:
            hi = mid - 1
    return lo
