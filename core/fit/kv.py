"""KV-cache arithmetic as vLLM's V1 engine does it: page sizes, groups, blocks, tokens.

Per layer and token, ordinary attention stores K and V for every KV head:
``2 x num_kv_heads (per tensor-parallel rank) x head_dim x dtype_bytes``. Multi-head latent
attention (DeepSeek style) stores one latent vector of ``kv_lora_rank + qk_rope_head_dim``
values and no separate V. Layers with a sliding window only ever hold about
``window - 1 + in-flight tokens`` of a request. Linear-attention (Mamba/GDN) layers keep a fixed
state and are not modelled here (they have no per-token KV).

Hybrid models (Gemma 2/3, gpt-oss) put their layers into *groups* of equal size, one per
attention type, sharing a single block pool: a block then costs ``page_bytes x group_size`` and a
request consumes blocks in every group. This module reproduces that bookkeeping
(``vllm/v1/core/kv_cache_utils.py`` and ``kv_cache_interface.py``, see reference §4.3 and §4.5).

All sizes are bytes; token counts are integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvpilot.core.errors import FitError
from kvpilot.core.models.spec import (
    FULL_ATTENTION,
    LINEAR_ATTENTION,
    SLIDING_ATTENTION,
    ModelSpec,
)

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

    kind: str  # full_attention | sliding_attention
    num_layers: int
    sliding_window: int | None


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
            if group.kind == SLIDING_ATTENTION and group.sliding_window:
                tokens = min(group.sliding_window - 1 + in_flight_tokens, max_model_len)
                total += math.ceil(tokens / self.block_size) + 1
            else:
                total += math.ceil(max_model_len / self.block_size)
        return total

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
    return 2 * kv_heads_per_rank(model, tensor_parallel_size) * model.head_dim * elem


def _group_layers(model: ModelSpec) -> tuple[tuple[KvGroup, ...], int]:
    """Group attention layers the way vLLM's hybrid KV-cache manager does."""
    counts: dict[tuple[str, int | None], int] = {}
    for kind in model.resolved_layer_types:
        if kind == LINEAR_ATTENTION:
            continue
        window = model.sliding_window if kind == SLIDING_ATTENTION else None
        if kind == SLIDING_ATTENTION and not window:
            kind, window = FULL_ATTENTION, None
        counts[(kind, window)] = counts.get((kind, window), 0) + 1
    if not counts:
        raise FitError(f"{model.model_id}: no attention layers; kvpilot cannot size its KV cache")
    if len(counts) == 1:
        (kind, window), n = next(iter(counts.items()))
        return (KvGroup(kind, n, window),), n
    # hybrid: groups of equal size (the smallest layer count), larger kinds split into several
    group_size = min(counts.values())
    groups: list[KvGroup] = []
    ordered = sorted(
        counts.items(), key=lambda item: (item[0][0] != FULL_ATTENTION, item[0][1] or 0)
    )
    for (kind, window), n in ordered:
        for _ in range(math.ceil(n / group_size)):
            groups.append(KvGroup(kind, group_size, window))
    return tuple(groups), group_size


def kv_layout(
    model: ModelSpec,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    block_size: int | None = None,
    model_dtype: str | None = None,
) -> KvLayout:
    """The KV layout of ``model`` per rank.

    Raises:
        FitError: unknown dtype, no attention layers, or a non-positive block size.
    """
    bs = block_size or DEFAULT_BLOCK_SIZE
    if bs <= 0:
        raise FitError("block_size must be positive")
    per_layer = bytes_per_token_per_layer(model, kv_cache_dtype, tensor_parallel_size, model_dtype)
    groups, group_size = _group_layers(model)
    attention_layers = sum(
        1 for kind in model.resolved_layer_types if kind != LINEAR_ATTENTION
    )
    return KvLayout(
        bytes_per_token_per_layer=per_layer,
        kv_bytes_per_token=per_layer * attention_layers,
        block_size=bs,
        page_bytes=per_layer * bs,
        group_size=group_size,
        groups=groups,
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


@dataclass(frozen=True)
class KvCapacity:
    """The KV part of a planned capacity: the blocks, tokens and concurrency vLLM would log
    for a KV budget (computed here; what a server reported is
    :class:`kvpilot.core.measurements.ReportedCapacity`)."""

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

    ``tokens_from_concurrency`` selects the formula of vLLM >= 0.12
    (``int(max_concurrency x max_model_len)``); older versions printed
    ``num_blocks // num_groups x block_size``.
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
