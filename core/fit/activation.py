"""Per-version model of what vLLM's profile run allocates besides weights and KV cache.

vLLM sizes the KV pool after a *profile run*: one dummy forward pass of
``max_num_batched_tokens`` tokens and one dummy sampler pass over ``max_num_seqs`` rows of
logits. The torch peak of that run above the steady allocation is the *activation peak*; the
drop in free memory not owned by torch is *non-torch* memory (NCCL, cuBLAS workspaces); from
vLLM 0.20 the CUDA-graph pool is estimated before the KV cache and taken out of the budget.

Every term here is computed from the tensors that the release's code allocates (shape x dtype x
the copies alive at the peak), and each piece names the file and function it reproduces
(``source``). The sampler is counted in *logit units*: one fp32 tensor of
``rows x padded_vocab`` (4 bytes per element). What the code does not determine (memory outside
torch, the CUDA-graph pool per captured token, and a per-row remainder of the activation peak)
is a :class:`FittedConstants` value: its ``source`` says "fitted" and lists the calibration
cases it was fitted on, and ``benchmarks/fit_accuracy.py`` refits all of them without each case
to report validation (leave-one-out) error.

All sizes are bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from kvpilot.core.base import versions
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import Release

if TYPE_CHECKING:
    from kvpilot.core.base.plan import PlanInputs


@dataclass(frozen=True)
class Buffer:
    """One tensor alive at a peak: ``units`` of its kind (logit units or per-token elements)."""

    name: str
    units: float
    source: str


# ---- the sampler's peak, in logit units (rows x padded vocab x 4 bytes) ----------------------

_LOGITS = Buffer(
    "logits in the model dtype (bf16: half a unit)", 0.5,
    "model_executor/layers/logits_processor.py LogitsProcessor._get_logits (lm_head output, "
    "gathered to the full vocab under tensor parallelism)",
)
_LOGITS_FP32 = Buffer(
    "fp32 copy of the logits", 1.0,
    "v1/sample/sampler.py Sampler.forward: logits.to(torch.float32) "
    "(V0: model_executor/layers/sampler.py Sampler.forward: logits.to(torch.float))",
)

#: the dummy sampler asks for top-k = vocab - 1 and top-p < 1, so the PyTorch path sorts the
#: whole vocabulary: the peak is inside ``logits.sort``
SAMPLER_SORT: tuple[Buffer, ...] = (
    _LOGITS,
    _LOGITS_FP32,
    Buffer("sorted values (fp32)", 1.0,
           "v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p: logits.sort(dim=-1) "
           "(V0: model_executor/layers/sampler.py _apply_top_k_top_p)"),
    Buffer("sort indices (int64)", 2.0, "same call: the index output is int64"),
    Buffer("torch segmented sort workspace: int64 iota input plus radix double buffers "
           "for keys (fp32) and values (int64)", 5.0,
           "torch aten/src/ATen/native/cuda/Sort.cu (cub segmented radix sort pairs), called "
           "by the logits.sort above"),
)

#: FlashInfer's fused top-k/top-p from logits: a masked copy and its softmax
SAMPLER_FLASHINFER: tuple[Buffer, ...] = (
    _LOGITS,
    _LOGITS_FP32,
    Buffer("top-k masked logits (fp32)", 1.0,
           "v1/sample/ops/topk_topp_sampler.py flashinfer_sample -> "
           "flashinfer.sampling.top_k_top_p_sampling_from_logits (top_k_mask_logits)"),
    Buffer("probabilities (fp32)", 1.0, "same call: softmax of the masked logits"),
)

#: 0.19+: a Triton kernel masks top-k/top-p in place (no sort) for batches of 8 rows or more
SAMPLER_TRITON: tuple[Buffer, ...] = (
    _LOGITS,
    _LOGITS_FP32,
    Buffer("probabilities (fp32)", 1.0,
           "v1/sample/ops/topk_topp_sampler.py TopKTopPSampler.forward_native: "
           "logits.softmax(dim=-1, dtype=torch.float32)"),
    Buffer("exponential noise q (fp32)", 1.0,
           "v1/sample/ops/topk_topp_sampler.py random_sample: empty_exponential_noise_like"),
)

#: 0.28+ V2 model runner (dense models): the dummy batch needs no logits processing
#: (``needs_logits_processing`` all False, so ``apply_sampling_params`` returns the logits as
#: they are) and top-k/top-p and logprobs are skipped; ``gumbel_sample`` keeps only
#: [rows, vocab / block] partial maxima
SAMPLER_V2: tuple[Buffer, ...] = (
    Buffer(_LOGITS.name, _LOGITS.units,
           "v1/worker/gpu/model_runner.py _dummy_sampler_run: model.compute_logits, then "
           "v1/worker/gpu/sample/sampler.py Sampler.apply_sampling_params returns them "
           "unchanged (no fp32 copy)"),
)


@dataclass(frozen=True)
class VersionProfile:
    """How one range of vLLM versions accounts for memory.

    The defaults are the V1 engine's rules from 0.10.2 to 0.27 (the V1 model runner, KV tokens
    from concurrency, no reserved null block): a row names only where its release differs.

    Attributes:
        since: first release the row applies to, as written (``"0.10.2"``, ``"0.28"``,
            ``"0"``; compared as a :class:`~kvpilot.core.base.versions.Release`).
        sampler: the tensors alive at the dummy sampler's peak (logit units).
        source: the release files and functions this row reproduces.
        engine: ``V0`` or ``V1``.
        sampler_adds_to_forward: True when the forward's activations are still alive while the
            sampler runs (V2 model runner): peak = forward + sampler; otherwise the larger wins.
        tokens_from_concurrency: "KV cache size: N tokens" = int(concurrency x max_model_len).
        null_block_reserved: the fit check keeps one block aside.
        v2_sampler: the V2 model runner's sampler for dense (non-MoE) models, None before 0.28.
        fitted_on: calibration cases a choice of this row was fitted on (empty: code only).
    """

    since: str
    sampler: tuple[Buffer, ...]
    source: str
    engine: str = "V1"
    sampler_adds_to_forward: bool = False
    tokens_from_concurrency: bool = True
    null_block_reserved: bool = False
    v2_sampler: tuple[Buffer, ...] | None = None
    fitted_on: tuple[str, ...] = ()

    @property
    def residual_in_bytes(self) -> bool:
        """The row's fitted activation residual is a byte count, not logit units.

        True where the sampler masks top-k/top-p in place (0.19+: ``apply_top_k_top_p_triton``
        for 8 rows or more, or FlashInfer's fused kernel): its only other buffer is one fp32
        vocabulary row per Triton program (at most one per SM, ``topk_topp_triton.py``), so
        what the counted tensors leave does not grow with rows x vocab. A Gemma 4 31B start-up
        on vLLM 0.26.0 (1,024 rows of a 262,144 vocabulary) logs 3.9 GiB, 0.3 GiB above its
        3.5 counted units; the same row's Qwen2.5-7B case leaves 0.5 GiB over 256 x 152,064.
        """
        return self.sampler is SAMPLER_TRITON

    @property
    def cudagraph_in_budget(self) -> bool:
        """The CUDA-graph estimate is subtracted from the KV budget (``versions.FEATURES``)."""
        return versions.supports("cudagraph_in_budget", self.since)

    @property
    def default_utilization(self) -> float:
        """``--gpu-memory-utilization`` default (``versions.FEATURES``)."""
        return versions.default_utilization(self.since)

    @property
    def sampler_logit_copies(self) -> float:
        """Logit units alive at the (V1 / V0 runner's) sampler peak."""
        return sum(b.units for b in self.sampler)

    @property
    def key(self) -> str:
        """The row's name, its first release as written in :data:`PROFILES` (``"0.10.2"``,
        ``"0.28"``): the key of the row's entries in ``fit_constants.json``."""
        return self.since


#: newest first; the first row whose ``since`` <= version applies
PROFILES: tuple[VersionProfile, ...] = (
    VersionProfile(
        since="0.28",
        sampler=SAMPLER_TRITON,
        v2_sampler=SAMPLER_V2,
        sampler_adds_to_forward=True,
        null_block_reserved=True,
        source=(
            "0.28.0 config/vllm.py use_v2_model_runner (V2 runner default for dense "
            "generative models, MoE stays on V1); v1/worker/gpu/model_runner.py profile_run / "
            "_dummy_sampler_run; engine/arg_utils.py get_batch_defaults (>= 160 GiB row)"
        ),
    ),
    VersionProfile(
        since="0.20",
        sampler=SAMPLER_TRITON,
        source=(
            "0.20.2 envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1 and "
            "v1/worker/gpu_worker.py determine_available_memory (graph estimate inside the "
            "budget); config/cache.py gpu_memory_utilization default 0.92"
        ),
    ),
    VersionProfile(
        since="0.19",
        sampler=SAMPLER_TRITON,
        source=(
            "0.19.1 v1/sample/ops/topk_topp_sampler.py apply_top_k_top_p -> "
            "topk_topp_triton.py apply_top_k_top_p_triton for >= 8 rows (no sort)"
        ),
    ),
    VersionProfile(
        since="0.13",
        sampler=SAMPLER_SORT,
        source=(
            "0.13.0 v1/sample/ops/topk_topp_sampler.py TopKTopPSampler.__init__ (FlashInfer "
            "sampler only with VLLM_USE_FLASHINFER_SAMPLER=1) -> forward_native sort path; "
            "v1/worker/gpu_model_runner.py _dummy_sampler_run"
        ),
    ),
    VersionProfile(
        since="0.10.2",
        sampler=SAMPLER_SORT,
        source=(
            "0.10.2 v1/worker/gpu_model_runner.py _dummy_sampler_run, forward_native sort path "
            "(FlashInfer sampler is used by default only where FlashInfer is installed: which "
            "path ran is fitted); v1/core/kv_cache_utils.py tokens from concurrency"
        ),
        fitted_on=("l40s-x8-qwen3-235b-2507-fp8-tp8",),
    ),
    VersionProfile(
        since="0.8",
        sampler=SAMPLER_FLASHINFER,
        tokens_from_concurrency=False,
        source=(
            "0.8.5-0.10.1.1 v1/sample/ops/topk_topp_sampler.py: VLLM_USE_FLASHINFER_SAMPLER "
            "unset means FlashInfer in V1 when installed (vllm-openai images ship it: which "
            "path ran is fitted); engine/arg_utils.py V1 default from 0.8 on SM >= 8.0"
        ),
        fitted_on=("dl-a100-80-qwen2-7b-u0.25", "dl-a100-80-qwen2-7b-u0.5"),
    ),
    VersionProfile(
        since="0",
        engine="V0",
        sampler=SAMPLER_SORT,
        tokens_from_concurrency=False,
        source=(
            "0.6.6 / 0.7.3 worker/model_runner.py GPUModelRunnerBase.profile_run (max_num_seqs "
            "dummy sequences, top_k = vocab - 1, top_p 0.99); model_executor/layers/sampler.py "
            "_apply_top_k_top_p; config.py SchedulerConfig max_num_batched_tokens"
        ),
    ),
)

#: the V0 row (also the fallback of 0.8-0.10.1 on GPUs below compute capability 8.0)
V0_PROFILE = PROFILES[-1]


def profile_for(
    version: str | None, compute_capability: tuple[int, int] | None = None
) -> VersionProfile:
    """The accounting rules of a vLLM version (unknown or newer -> the newest rules).

    From 0.8 to 0.10.1 the V1 engine refuses GPUs below compute capability 8.0 and vLLM falls
    back to V0 (engine/arg_utils.py ``_is_v1_supported_oracle``, "Compute Capability < 8.0");
    0.10.2 drops that check and 0.11 drops V0.
    """
    v = Release.parse(version)
    for row in PROFILES:
        if v.at_least(row.since):
            if (
                row.engine == "V1"
                and compute_capability is not None
                and compute_capability < (8, 0)
                and not versions.supports("v1_below_sm80", v)
            ):
                return V0_PROFILE
            return row
    return PROFILES[-1]


def in_flight_batches(version: str | None) -> int:
    """Scheduler batches whose tokens a sliding-window (or chunked-local) layer reserves for.

    From 0.26 ``VllmConfig.max_in_flight_tokens`` is ``max_concurrent_batches x
    max_num_batched_tokens``, two batches with async scheduling (the default, one GPU, no
    pipeline parallelism); before, the KV specs reserved one batch of ``max_num_batched_tokens``.
    """
    return 2 if versions.supports("kv_in_flight_concurrent_batches", version) else 1


def uses_v2_runner(model: ModelSpec, profile: VersionProfile) -> bool:
    """True where a profile carries the V2 model runner's sampler for this model (a row's
    default: dense models; :func:`kvpilot.core.fit.runner.runner_profile` sets it per release
    and model)."""
    return profile.v2_sampler is not None and model.moe is None


# ---- constants the code does not determine ------------------------------------------------


@dataclass(frozen=True)
class FittedConstants:
    """Values fitted on calibration cases with a known vLLM version (bytes).

    Attributes:
        non_torch_single_gpu_bytes: memory outside torch's allocator on one GPU (cuBLAS and
            attention workspaces, allocator slack).
        non_torch_tensor_parallel_bytes: the same per GPU under tensor parallelism (adds NCCL
            and custom all-reduce buffers).
        cudagraph_bytes_per_layer_hidden_token: CUDA-graph pool per layer, hidden unit and
            token of the largest capture size.
        activation_residual_units: per version row (``VersionProfile.key``), logit units the
            computed activation peak misses on that row's cases (0 where none reported); rows
            whose sampler sorts the vocabulary (its workspace grows with rows x vocab).
        activation_residual_bytes: the same in bytes for rows whose sampler masks top-k/top-p
            in place (:attr:`VersionProfile.residual_in_bytes`): nothing there grows with
            rows x vocab beyond the tensors counted, so what is left does not scale with them.
        row_remainder_bytes: per version row whose budget holds vLLM's CUDA-graph estimate
            (0.20+), what that row's budgets leave unexplained after every other term (bytes,
            counted with the activation peak): the estimate is not the pool size that older
            releases log and the graph constant is fitted on.
        fitted_on: case ids each constant was fitted on, by constant name.
    """

    non_torch_single_gpu_bytes: int
    non_torch_tensor_parallel_bytes: int
    cudagraph_bytes_per_layer_hidden_token: float
    activation_residual_units: dict[str, float] = field(default_factory=dict)
    row_remainder_bytes: dict[str, int] = field(default_factory=dict)
    fitted_on: dict[str, tuple[str, ...]] = field(default_factory=dict)
    activation_residual_bytes: dict[str, int] = field(default_factory=dict)

    def source(self, name: str) -> str:
        """``"fitted on <case ids>"`` for one constant, or that it is a prior (the plan's term
        note)."""
        cases = self.fitted_on.get(name, ())
        if not cases:
            return "a prior (no public start-up to fit it on)"
        return "fitted on " + ", ".join(cases)


#: the file ``benchmarks/fit_accuracy.py --write-constants`` writes (all known-version cases)
CONSTANTS_FILE = "fit_constants.json"

_PRIOR = FittedConstants(
    non_torch_single_gpu_bytes=int(0.06 * GiB),
    non_torch_tensor_parallel_bytes=int(0.45 * GiB),
    cudagraph_bytes_per_layer_hidden_token=10.0,
)


@dataclass(frozen=True)
class Validation:
    """Leave-one-out error of available KV memory per version row, as a share of the budget.

    ``half_width_fraction[row key]`` is the largest |predicted - reported| available KV of that
    row's known-version cases divided by the case's requested memory (``total x utilization``
    per GPU; single GPU, ``"<row>/tp"`` for tensor parallelism), each predicted with every
    fitted constant refitted without it. A share, not bytes: the cases run on 16 GB to 268 GiB
    cards and what a term misses grows with the model and the budget (0.5 % of a B300 is more
    GiB than a whole error on a 4090). ``"*"`` / ``"*/tp"`` and ``pooled_half_width_fraction``
    are the same over all rows (rows without cases use them). ``cases[row key]`` lists the
    case ids behind each row's figure.
    """

    half_width_fraction: dict[str, float] = field(default_factory=dict)
    pooled_half_width_fraction: float = 0.03
    cases: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def fraction_for(self, profile: VersionProfile, tensor_parallel_size: int = 1) -> float:
        """The band half-width of a row for one GPU or tensor parallelism (share of budget).

        Keys are ``"<row>"`` / ``"<row>/tp"``; a row without validated cases of its kind uses
        ``"*"`` / ``"*/tp"`` (all rows), then ``pooled_half_width_fraction``.
        """
        kind = "/tp" if tensor_parallel_size > 1 else ""
        for key in (profile.key + kind, "*" + kind):
            if key in self.half_width_fraction:
                return self.half_width_fraction[key]
        return self.pooled_half_width_fraction

    def half_width_for(
        self, profile: VersionProfile, requested_bytes: int, tensor_parallel_size: int = 1
    ) -> int:
        """The band half-width in bytes for a plan requesting ``requested_bytes`` per GPU."""
        return int(self.fraction_for(profile, tensor_parallel_size) * max(0, requested_bytes))


def _load() -> tuple[FittedConstants, Validation]:
    try:
        text = (resources.files("kvpilot.resources") / CONSTANTS_FILE).read_text("utf-8")
        data = json.loads(text)
    except (OSError, ValueError, ModuleNotFoundError):
        return _PRIOR, Validation()
    c = data.get("constants", {})
    constants = FittedConstants(
        non_torch_single_gpu_bytes=int(c.get("non_torch_single_gpu_bytes",
                                             _PRIOR.non_torch_single_gpu_bytes)),
        non_torch_tensor_parallel_bytes=int(c.get("non_torch_tensor_parallel_bytes",
                                                  _PRIOR.non_torch_tensor_parallel_bytes)),
        cudagraph_bytes_per_layer_hidden_token=float(
            c.get("cudagraph_bytes_per_layer_hidden_token",
                  _PRIOR.cudagraph_bytes_per_layer_hidden_token)),
        activation_residual_units={
            str(k): float(v) for k, v in c.get("activation_residual_units", {}).items()
        },
        row_remainder_bytes={
            str(k): int(v) for k, v in c.get("row_remainder_bytes", {}).items()
        },
        fitted_on={str(k): tuple(v) for k, v in c.get("fitted_on", {}).items()},
        activation_residual_bytes={
            str(k): int(v) for k, v in c.get("activation_residual_bytes", {}).items()
        },
    )
    v = data.get("validation", {})
    validation = Validation(
        half_width_fraction={
            str(k): float(x) for k, x in v.get("half_width_fraction", {}).items()
        },
        pooled_half_width_fraction=float(v.get("pooled_half_width_fraction", 0.03)),
        cases={str(k): tuple(x) for k, x in v.get("cases", {}).items()},
    )
    return constants, validation


#: the constants every plan uses, and the validation error that sizes its band
FITTED, VALIDATION = _load()


# ---- the forward pass -----------------------------------------------------------------------

#: elements per token alive at the dense MLP's peak, per intermediate unit: the gate_up
#: projection output [T, 2I] and SiluAndMul's output [T, I] exist together
#: (model_executor/models/llama.py LlamaMLP.forward, layers/activation.py SiluAndMul.forward)
FORWARD_INTERMEDIATE_FACTOR = 3.0
#: hidden-sized buffers per token alive at that moment: the residual stream, the normalised
#: layer input and the embedding / previous layer output (models/llama.py LlamaDecoderLayer)
FORWARD_HIDDEN_FACTOR = 3.0


def activation_bytes_per_element(serve_dtype: str | None = None) -> int:
    """Bytes of one activation element: 4 when serving in float32 (explicit), else 2.

    ``serve_dtype`` None means ``--dtype auto``, which serves float32 checkpoints in 16 bits.
    """
    dtype = (serve_dtype or "").lower()
    return 4 if dtype in ("float32", "float", "fp32") else 2


def forward_elements_per_token(model: ModelSpec, tensor_parallel_size: int = 1) -> float:
    """Activation elements per token at the forward's peak (per rank).

    Dense: ``3 x I / tp + 3 x H``. MoE (model_executor/layers/fused_moe/fused_moe.py
    fused_experts: intermediate_cache1 [T, k, 2N], intermediate_cache2 [T x k, N],
    intermediate_cache3 [T, k, H], N = moe_intermediate / tp): ``k x (3N + H)``, plus a shared
    expert's dense MLP, plus the hidden buffers.
    """
    tp = max(1, tensor_parallel_size)
    h = model.hidden_size
    if model.moe is not None:
        moe_i = model.moe.moe_intermediate_size or model.intermediate_size or h
        per_routed = FORWARD_INTERMEDIATE_FACTOR * moe_i / tp + h
        per_token = model.moe.num_experts_per_tok * per_routed
        if model.moe.num_shared_experts and model.intermediate_size:
            per_token += FORWARD_INTERMEDIATE_FACTOR * model.intermediate_size / tp
    else:
        inter = model.intermediate_size or 4 * h
        per_token = FORWARD_INTERMEDIATE_FACTOR * inter / tp
    return per_token + FORWARD_HIDDEN_FACTOR * h


def forward_peak_bytes(
    model: ModelSpec, num_tokens: int, tensor_parallel_size: int = 1, elem_bytes: int = 2
) -> int:
    """Peak activations of one forward pass over ``num_tokens`` tokens (bytes, per rank)."""
    return int(num_tokens * forward_elements_per_token(model, tensor_parallel_size) * elem_bytes)


def padded_vocab(vocab: int, pad_to: int = 64) -> int:
    """The vocabulary padded as VocabParallelEmbedding pads it (DEFAULT_VOCAB_PADDING_SIZE 64)."""
    return -(-vocab // pad_to) * pad_to


def logit_unit_bytes(model: ModelSpec, num_seqs: int) -> int:
    """One logit unit: ``num_seqs x padded vocab`` fp32 elements (bytes)."""
    return num_seqs * padded_vocab(model.vocab_size) * 4


def sampler_buffers(
    model: ModelSpec, num_seqs: int, profile: VersionProfile
) -> tuple[Buffer, ...]:
    """The tensors alive at the dummy sampler's peak for this model and version."""
    if uses_v2_runner(model, profile) and profile.v2_sampler is not None:
        return profile.v2_sampler
    if profile.sampler is SAMPLER_TRITON and num_seqs < 8:
        return SAMPLER_SORT  # the Triton kernel is used from 8 rows on
    return profile.sampler


def sampler_peak_bytes(
    model: ModelSpec,
    num_seqs: int,
    profile: VersionProfile,
    tensor_parallel_size: int = 1,  # noqa: ARG001 - every rank samples the full vocabulary
    constants: FittedConstants | None = None,
    *,
    compiled: bool = True,
) -> int:
    """The dummy sampler's peak: logit units alive x ``num_seqs x vocab x 4`` (bytes).

    The row's fitted residual is added where it was seen: on V0 rows always, on V1 rows only
    for a compiled profile run (``compiled``; ``--enforce-eager`` sets ``-cc.mode=none`` in
    ``config/vllm.py``, so no torch.compile runs inside the profile), see
    :func:`residual_applies`.
    """
    residual_units, residual_bytes = sampler_residual(
        profile, num_seqs, constants, compiled=compiled)
    units = sum(b.units for b in sampler_buffers(model, num_seqs, profile)) + residual_units
    return max(0, int(max(units, 0.0) * logit_unit_bytes(model, num_seqs)) + residual_bytes)


def sampler_residual(
    profile: VersionProfile, num_seqs: int, constants: FittedConstants | None = None, *,
    compiled: bool = True,
) -> tuple[float, int]:
    """The fitted residual a run's sampler peak gets: (logit units, bytes).

    None for an eager V1 run (:func:`residual_applies`); the byte remainder belongs to the
    sampler's run, so none where no sampler runs (``num_seqs`` 0: pooling).
    """
    c = constants or FITTED
    if not residual_applies(profile, compiled=compiled):
        return 0.0, 0
    residual_bytes = c.activation_residual_bytes.get(profile.key, 0) if num_seqs > 0 else 0
    return c.activation_residual_units.get(profile.key, 0.0), residual_bytes


def residual_applies(profile: VersionProfile, *, compiled: bool) -> bool:
    """Whether a row's fitted activation residual applies to a run.

    The V1 residuals are fitted on compiled start-ups (the 0.20 row's on one torch.compile'd
    Qwen2.5-7B-AWQ run); an eager V1 run (Gemma 4 E2B on vLLM 0.21.0 with ``--enforce-eager``)
    leaves exactly the code-derived sampler copies, so eager V1 runs get none of it.
    """
    return compiled or profile.engine != "V1"


def activation_peak_bytes(
    model: ModelSpec,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    profile: VersionProfile,
    tensor_parallel_size: int = 1,
    serve_dtype: str | None = None,
    constants: FittedConstants | None = None,
    compiled: bool = True,
) -> int:
    """Predicted "peak activation" of vLLM's profile run (bytes per rank).

    ``compiled``: False for ``--enforce-eager`` (no torch.compile; see
    :func:`sampler_peak_bytes`).

    The forward's intermediates are freed before the sampler runs (V0 and the V1 runner), so
    the larger of the two wins; the hidden states of all batched tokens stay alive through the
    sampler. Under the V2 runner the forward's buffers are still held: they add.
    """
    elem = activation_bytes_per_element(serve_dtype)
    forward = forward_peak_bytes(model, max_num_batched_tokens, tensor_parallel_size, elem)
    hidden = max_num_batched_tokens * model.hidden_size * elem
    sampler = sampler_peak_bytes(
        model, max_num_seqs, profile, tensor_parallel_size, constants=constants,
        compiled=compiled,
    )
    remainder = (constants or FITTED).row_remainder_bytes.get(profile.key, 0)
    if profile.sampler_adds_to_forward and uses_v2_runner(model, profile):
        return max(0, forward + hidden + sampler + remainder)
    return max(0, max(forward, sampler + hidden) + remainder)


def max_cudagraph_capture_size(
    max_num_seqs: int, max_num_batched_tokens: int, largest_default: int = 512
) -> int:
    """vLLM's default largest capture size: min(2 x max_num_seqs, 512), capped by batch tokens.

    (config/vllm.py ``_set_cudagraph_sizes``: min(max_num_seqs * 2, 512); from 0.28 the 512
    is 1024 on data-center Blackwell, SM 10.x: ``largest_default``.)
    """
    return max(1, min(2 * max_num_seqs, largest_default, max_num_batched_tokens))


def largest_default_capture(version: str | None, compute_capability: tuple[int, int] | None
                            ) -> int:
    """512, or 1024 on SM 10.x from vLLM 0.28 (``is_device_capability_family(100)``)."""
    if (compute_capability is not None and compute_capability[0] == 10
            and versions.supports("blackwell_capture_1024", version)):
        return 1024
    return 512


#: share of the default graph pool kept when ``cudagraph_mode`` is PIECEWISE on a release whose
#: default also captures FULL decode graphs (0.11+): an assumption (one FULL and one piecewise
#: graph per capture size, of similar size), not fitted on logs
PIECEWISE_GRAPH_SHARE = 0.5


def cudagraph_bytes(
    model: ModelSpec,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    tensor_parallel_size: int = 1,  # noqa: ARG001 - the fitted pool has no per-rank term yet
    enforce_eager: bool = False,
    constants: FittedConstants | None = None,
    largest_default: int = 512,
    capture_size: int | None = None,
    cudagraph_mode: str | None = None,
    vllm_version: str | None = None,
) -> int:
    """Estimated CUDA-graph pool (bytes per rank); 0 with ``--enforce-eager`` or mode NONE.

    The size is ``fitted`` per layer, hidden unit and captured token (graph memory is what
    ``profile_cudagraph_memory`` measures on the device; no shape in the code fixes it).
    ``capture_size`` is ``--max-cudagraph-capture-size`` (None: vLLM's default); the pool grows
    with it linearly. ``cudagraph_mode`` PIECEWISE on 0.11+ keeps
    :data:`PIECEWISE_GRAPH_SHARE` of the default (FULL_AND_PIECEWISE) pool.
    """
    mode = (cudagraph_mode or "").upper()
    if enforce_eager or mode == "NONE":
        return 0
    c = constants or FITTED
    default = max_cudagraph_capture_size(max_num_seqs, max_num_batched_tokens, largest_default)
    capture = min(max(1, capture_size), max_num_batched_tokens) if capture_size else default
    share = 1.0
    if mode == "PIECEWISE" and versions.supports("full_cudagraphs_by_default", vllm_version):
        share = PIECEWISE_GRAPH_SHARE
    return int(
        c.cudagraph_bytes_per_layer_hidden_token
        * capture
        * model.num_hidden_layers
        * model.hidden_size
        * share
    )


def plan_cudagraph_bytes(
    inputs: PlanInputs,
    model: ModelSpec,
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    constants: FittedConstants | None = None,
) -> int:
    """:func:`cudagraph_bytes` (bytes per rank) with the graph settings of ``inputs``: eager
    mode, ``--cudagraph-mode``, ``--max-cudagraph-capture-size`` and the release and compute
    capability that set the default largest capture, for ``model`` (the whole model, or the
    pipeline stage a rank holds) capturing up to ``max_num_seqs`` sequences."""
    return cudagraph_bytes(
        model,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        tensor_parallel_size=inputs.tensor_parallel_size,
        enforce_eager=inputs.enforce_eager,
        constants=constants,
        largest_default=largest_default_capture(inputs.vllm_version, inputs.compute_capability),
        capture_size=inputs.max_cudagraph_capture_size,
        cudagraph_mode=inputs.cudagraph_mode,
        vllm_version=inputs.vllm_version,
    )


def non_torch_bytes(
    tensor_parallel_size: int = 1, constants: FittedConstants | None = None
) -> int:
    """Memory outside torch's allocator after the profile run (bytes per rank, fitted)."""
    c = constants or FITTED
    if tensor_parallel_size > 1:
        return c.non_torch_tensor_parallel_bytes
    return c.non_torch_single_gpu_bytes
