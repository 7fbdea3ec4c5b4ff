"""Per-version model of what vLLM's profile run takes besides weights and KV cache.

vLLM sizes the KV pool after a *profile run*: one dummy forward pass of
``max_num_batched_tokens`` tokens and one dummy sampler pass over ``max_num_seqs`` rows of
logits. The torch peak of that run above the steady allocation is the *activation peak*; the
drop in free memory not owned by torch is *non-torch* memory (NCCL, cuBLAS workspaces); from
vLLM 0.20 the CUDA-graph pool is estimated before the KV cache and taken out of the budget.

The shape of each term is physical (tokens x widths x bytes); the coefficients differ between
vLLM generations because the dummy sampler changed (top-k/top-p sorting added in 0.10.2, a leaner
sampler later, then the V2 model runner). Each :class:`VersionProfile` row says which public
start-up logs it was fitted on; ``benchmarks/fit_accuracy.py`` re-checks all of them.

All sizes are bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.core.models.spec import ModelSpec

GiB = 1 << 30


@dataclass(frozen=True)
class Version:
    """A vLLM version as comparable numbers (``0.10.1.1`` -> (0, 10, 1, 1))."""

    parts: tuple[int, ...]

    @classmethod
    def parse(cls, text: str | None) -> Version:
        """Parse ``0.33.0``, ``v0.11.0+cpu``, ``0.10.2rc1``; unparsable -> the newest profile."""
        if not text:
            return cls((99,))
        core = text.strip().lstrip("v").split("+")[0]
        parts: list[int] = []
        for piece in core.split("."):
            digits = ""
            for ch in piece:
                if not ch.isdigit():
                    break
                digits += ch
            if not digits:
                break
            parts.append(int(digits))
        return cls(tuple(parts) or (99,))

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.parts >= other.parts

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self.parts < other.parts

    def __str__(self) -> str:
        return ".".join(str(p) for p in self.parts)


@dataclass(frozen=True)
class VersionProfile:
    """How one range of vLLM versions accounts for memory.

    Attributes:
        since: first version the row applies to.
        engine: ``V0`` or ``V1``.
        sampler_logit_copies: fp32 ``max_num_seqs x vocab`` logit-sized buffers alive at the
            sampler's peak (the dummy sampler's temporaries: probabilities, sort values and
            indices...).
        sampler_adds_to_forward: True when the forward's activations are still alive while the
            sampler runs (V2 model runner): peak = forward + sampler; otherwise the larger wins.
        cudagraph_in_budget: the CUDA-graph estimate is subtracted from the KV budget.
        default_utilization: ``--gpu-memory-utilization`` default.
        tokens_from_concurrency: "KV cache size: N tokens" = int(concurrency x max_model_len).
        null_block_reserved: the fit check keeps one block aside.
        in_flight_batches: scheduler batches in flight (sliding-window reservation multiplier).
        fitted_on: public start-up logs (calibration case ids) this row reproduces.
    """

    since: Version
    engine: str
    sampler_logit_copies: float
    sampler_adds_to_forward: bool
    cudagraph_in_budget: bool
    default_utilization: float
    tokens_from_concurrency: bool
    null_block_reserved: bool
    in_flight_batches: int
    fitted_on: tuple[str, ...]


#: newest first; the first row whose ``since`` <= version applies
PROFILES: tuple[VersionProfile, ...] = (
    VersionProfile(
        since=Version((0, 28)),
        engine="V1",
        sampler_logit_copies=1.25,
        sampler_adds_to_forward=True,
        cudagraph_in_budget=True,
        default_utilization=0.92,
        tokens_from_concurrency=True,
        null_block_reserved=True,
        in_flight_batches=2,
        fitted_on=("public V2-runner logs: H100 Llama-3.1-8B, RTX 4090 0.6B model",),
    ),
    VersionProfile(
        since=Version((0, 20)),
        engine="V1",
        sampler_logit_copies=7.0,
        sampler_adds_to_forward=False,
        cudagraph_in_budget=True,
        default_utilization=0.92,
        tokens_from_concurrency=True,
        null_block_reserved=False,
        in_flight_batches=1,
        fitted_on=("rtx4080-16g-qwen25-7b-awq-32k",),
    ),
    VersionProfile(
        since=Version((0, 10, 2)),
        engine="V1",
        sampler_logit_copies=9.6,
        sampler_adds_to_forward=False,
        cudagraph_in_budget=False,
        default_utilization=0.9,
        tokens_from_concurrency=True,
        null_block_reserved=False,
        in_flight_batches=1,
        fitted_on=(
            "l40s-x8-qwen3-235b-2507-fp8-tp8",
            "llmd-h100-llama31-8b",
            "llmd-h100-qwen3-0.6b-16000",
            "llmd-h100-qwen3-32b-16000",
            "llmd-h100-gptoss20b",
        ),
    ),
    VersionProfile(
        since=Version((0, 10)),
        engine="V1",
        sampler_logit_copies=3.0,
        sampler_adds_to_forward=False,
        cudagraph_in_budget=False,
        default_utilization=0.9,
        tokens_from_concurrency=False,
        null_block_reserved=False,
        in_flight_batches=1,
        fitted_on=("dl-a100-80-qwen2-7b-u0.5", "dl-a100-80-qwen2-7b-u0.25"),
    ),
    VersionProfile(
        since=Version((0,)),
        engine="V0",
        sampler_logit_copies=9.6,
        sampler_adds_to_forward=False,
        cudagraph_in_budget=False,
        default_utilization=0.9,
        tokens_from_concurrency=False,
        null_block_reserved=False,
        in_flight_batches=1,
        fitted_on=("t4-llama32-3b-fp16-2k", "vllm10517-rtx3090-llama31-8b-20k"),
    ),
)


def profile_for(version: str | None) -> VersionProfile:
    """The accounting rules of a vLLM version (unknown or newer -> the newest rules)."""
    v = Version.parse(version)
    for row in PROFILES:
        if v >= row.since:
            return row
    return PROFILES[-1]


#: per-token bytes of the forward pass at its peak, in activation elements:
#: gate+up projection (2 x I), the activated product (I), and about three hidden-sized buffers
#: (residual, normalised input, attention output). Fitted on RTX 3090 V0 logs at 20k and 29k
#: tokens (2.07 and 2.99 GiB for Llama-3.1-8B: 111 KB per token).
FORWARD_INTERMEDIATE_FACTOR = 3.0
FORWARD_HIDDEN_FACTOR = 3.0

#: CUDA-graph pool per layer and hidden unit at the largest capture size (bytes per
#: capture-token), from graph sizes logged for 7B/8B dense models (0.4-0.67 GiB for 28-32 layers
#: at capture size 512).
CUDAGRAPH_BYTES_PER_LAYER_HIDDEN_TOKEN = 10.0

#: memory outside torch's allocator: cuBLAS/attention workspaces (one GPU), plus NCCL and custom
#: all-reduce buffers with tensor parallelism. Logged values: 0.05-0.26 GiB on one GPU,
#: 0.21-0.55 GiB per GPU under tensor parallelism.
NON_TORCH_SINGLE_GPU_BYTES = int(0.13 * GiB)
NON_TORCH_TENSOR_PARALLEL_BYTES = int(0.45 * GiB)


def activation_bytes_per_element(model: ModelSpec, serve_dtype: str | None = None) -> int:
    """Bytes of one activation element: 4 when serving in float32 (explicit), else 2.

    ``serve_dtype`` None means ``--dtype auto``, which serves float32 checkpoints in 16 bits.
    """
    dtype = (serve_dtype or "").lower()
    return 4 if dtype in ("float32", "float", "fp32") else 2


def forward_peak_bytes(
    model: ModelSpec, num_tokens: int, tensor_parallel_size: int = 1, elem_bytes: int = 2
) -> int:
    """Peak activations of one forward pass over ``num_tokens`` tokens (bytes, per rank)."""
    tp = max(1, tensor_parallel_size)
    h = model.hidden_size
    if model.moe is not None:
        moe_i = model.moe.moe_intermediate_size or model.intermediate_size or h
        # fused-MoE caches: gate/up (2I), activated (I) and down output (H) per routed token
        per_routed = FORWARD_INTERMEDIATE_FACTOR * moe_i / tp + h
        per_token = model.moe.num_experts_per_tok * per_routed
        if model.moe.num_shared_experts and model.intermediate_size:
            per_token += FORWARD_INTERMEDIATE_FACTOR * model.intermediate_size / tp
    else:
        inter = model.intermediate_size or 4 * h
        per_token = FORWARD_INTERMEDIATE_FACTOR * inter / tp
    per_token += FORWARD_HIDDEN_FACTOR * h
    return int(num_tokens * per_token * elem_bytes)


def sampler_peak_bytes(
    model: ModelSpec, num_seqs: int, profile: VersionProfile, tensor_parallel_size: int = 1
) -> int:
    """The dummy sampler's peak: fp32 logit-sized buffers for ``num_seqs`` rows (bytes)."""
    vocab = _padded_vocab(model.vocab_size)
    return int(profile.sampler_logit_copies * num_seqs * vocab * 4)


def activation_peak_bytes(
    model: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    profile: VersionProfile,
    tensor_parallel_size: int = 1,
    serve_dtype: str | None = None,
) -> int:
    """Predicted "peak activation" of vLLM's profile run (bytes per rank)."""
    elem = activation_bytes_per_element(model, serve_dtype)
    forward = forward_peak_bytes(model, max_num_batched_tokens, tensor_parallel_size, elem)
    hidden = max_num_batched_tokens * model.hidden_size * elem
    sampler = sampler_peak_bytes(model, max_num_seqs, profile, tensor_parallel_size)
    if profile.sampler_adds_to_forward:
        return forward + hidden + sampler
    return max(forward, sampler + hidden)


def max_cudagraph_capture_size(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """vLLM's default largest capture size: min(2 x max_num_seqs, 512), capped by batch tokens."""
    return max(1, min(2 * max_num_seqs, 512, max_num_batched_tokens))


def cudagraph_bytes(
    model: ModelSpec,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    tensor_parallel_size: int = 1,
    enforce_eager: bool = False,
) -> int:
    """Estimated CUDA-graph pool (bytes per rank); 0 with ``--enforce-eager``."""
    if enforce_eager:
        return 0
    capture = max_cudagraph_capture_size(max_num_seqs, max_num_batched_tokens)
    return int(
        CUDAGRAPH_BYTES_PER_LAYER_HIDDEN_TOKEN
        * capture
        * model.num_hidden_layers
        * model.hidden_size
    )


def non_torch_bytes(tensor_parallel_size: int = 1) -> int:
    """Memory outside torch's allocator after the profile run (bytes per rank)."""
    if tensor_parallel_size > 1:
        return NON_TORCH_TENSOR_PARALLEL_BYTES
    return NON_TORCH_SINGLE_GPU_BYTES


def _padded_vocab(vocab: int, pad_to: int = 64) -> int:
    return -(-vocab // pad_to) * pad_to
