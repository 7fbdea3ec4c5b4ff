"""LoRA adapter slots in the memory budget, counted the way vLLM allocates them.

With ``--enable-lora`` vLLM wraps every supported layer of the model when it loads it
(``lora/model_manager.py`` ``_create_lora_modules``) and each wrapper allocates, on the GPU and
before the profile run, zero-filled stacks for ``--max-loras`` adapters at ``--max-lora-rank``
in ``--lora-dtype`` (``auto``: the model's dtype; ``config/lora.py`` ``verify_with_model_config``).
The stacks are part of "model loading" memory, so they come out of the KV cache one for one.
Shapes per wrapper, per slot, per rank ``t`` (``lora/layers/``, identical in the 0.20.0 and
0.32.0 wheels; ``r`` the rank, ``h`` hidden size):

* ``MergedQKVParallelLinearWithLoRA`` (qkv_proj): A 3 x (r, h); B (q/t, r), 2 x (kv/t, r)
* ``RowParallelLinearWithLoRA`` (o_proj, down_proj): A (r, in/t); B (h, r)
* ``MergedColumnParallelLinearWithLoRA`` (gate_up_proj): A 2 x (r, h); B 2 x (i/t, r)
* ``FusedMoEWithLoRA`` (experts): A 2 x (E, r, h) + (E, r, I/t); B 2 x (E, I/t, r) + (E, h, r);
  the router (``ReplicatedLinear``) A (r, h), B (E, r)
* ``LogitsProcessorWithLoRA`` (lm_head): A (r, h); B (vocab, r) - only for models whose class
  lists ``lm_head`` in ``embedding_modules`` (:data:`LM_HEAD_LORA_ARCHITECTURES`); it refuses a
  vocabulary above 258,048 ("When using LoRA, vocab size must be <= 258048")
* ``VocabParallelEmbeddingWithLoRA`` (embed_tokens, same models): A (vocab, r); B (h, r)

Up to 0.11 the embedding carried ``--lora-extra-vocab-size`` (256) extra rows, a
``(slots, 256, h)`` table in the model's dtype, and the lm_head B stack was padded to a multiple
of 256 rows (``lora_vocab_padding_size``); the 0.20.0 wheel has neither.

The profile run activates ``max_loras`` dummy adapters at rank min(max_lora_rank, 8) kept in host
memory (``v1/worker/lora_model_runner_mixin.py`` ``maybe_setup_dummy_loras``); on the GPU it adds
the shrink kernels' fp32 buffer ``(slices, tokens, rank)`` and the Punica index tensors, both
small. With CUDA graphs on, ``compilation_config.cudagraph_specialize_lora`` (default True)
captures every size twice, without and with adapters (``v1/cudagraph_dispatcher.py``
``_get_lora_cases``: ``[0, max_loras + 1]``). ``profile_cudagraph_memory`` then estimates
``first capture + per graph x (2n - 1)`` instead of ``first + per graph x (n - 1)``: between
one and two times the graph estimate without LoRA, as the first capture's share is not known
here. The plan takes 1.5 times and widens the band by the other half; the one public
measurement, in the pull request that added the specialisation (vllm-project/vllm#25914),
went from 1.62 to 2.38 GiB of graph memory (x1.47). ``--max-cpu-loras``
adapters are cached in host memory only (no GPU bytes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpilot.core.base import failures
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import ALLOWED_RANKS, DEFAULT_MAX_LORA_RANK
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import supports
from kvpilot.core.fit import kv

#: vLLM's default (config/lora.py LoRAConfig): one slot (the rank's default and the ranks
#: ``--max-lora-rank`` accepts are serving vocabulary, in :mod:`kvpilot.core.base.plan`)
DEFAULT_MAX_LORAS = 1

#: the largest vocabulary ``LogitsProcessorWithLoRA.create_lora_weights`` accepts (257,024
#: in the 0.11.0 wheel, whose check counts the extra LoRA vocabulary)
MAX_LORA_VOCAB = 258048
OLD_MAX_LORA_VOCAB = 257024


def allowed_ranks(vllm_version: str | None = None) -> tuple[int, ...]:
    """The ``--max-lora-rank`` values ``vllm_version`` accepts."""
    if supports("lora_extra_vocab", vllm_version):
        return ALLOWED_RANKS[1:]
    return ALLOWED_RANKS

#: extra vocabulary rows and lm_head padding of the releases that had them (0.11.0 wheel)
OLD_EXTRA_VOCAB = 256
OLD_VOCAB_PADDING = 256

#: architectures whose vLLM class lists ``lm_head`` (and ``embed_tokens``) in
#: ``embedding_modules``, its own or inherited (Phi-3's class is Llama's), so their lm_head and
#: embedding get LoRA stacks too: the registry's architectures whose class resolves to such a
#: list in the 0.20.0 and 0.32.0 wheels (drafters and embedding models left out; the Exaone
#: MoE, Granite SWA and K2 Horizon names first appear after 0.20.0); Qwen2, Mistral, Gemma 2 to
#: 4, GPT-OSS, DeepSeek and GLM classes list none
LM_HEAD_LORA_ARCHITECTURES = frozenset({
    "LlamaForCausalLM", "LLaMAForCausalLM", "InternLM3ForCausalLM", "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "MixtralForCausalLM",
    "GraniteForCausalLM", "GraniteMoeForCausalLM", "GraniteMoeSharedForCausalLM",
    "GraniteMoeHybridForCausalLM", "PhiMoEForCausalLM", "NemotronForCausalLM",
    "NemotronHForCausalLM", "MiniCPMForCausalLM", "ExaoneForCausalLM", "Exaone4ForCausalLM",
    "JambaForCausalLM", "FalconH1ForCausalLM", "SolarForCausalLM", "ApertusForCausalLM",
    "Lfm2ForCausalLM", "Lfm2MoeForCausalLM", "DeciLMForCausalLM", "Phi3ForCausalLM",
    "Llama4ForCausalLM", "Ernie4_5ForCausalLM", "MiniCPM3ForCausalLM", "ExaoneMoeForCausalLM",
    "ExaoneMoEForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM",
    "HyperCLOVAXForCausalLM", "IQuestCoderForCausalLM", "K2HorizonForCausalLM",
    "Param2MoEForCausalLM", "TeleChat2ForCausalLM", "TeleChat3ForCausalLM",
    "TeleFLMForCausalLM", "NemotronHPuzzleForCausalLM",
})


#: model types whose MoE layers keep a dense MLP of ``intermediate_size`` beside the experts,
#: both wrapped (Gemma 4's decoder layer builds ``mlp`` and, with ``num_experts``, ``experts``;
#: ``model_executor/models/gemma4.py`` in the 0.32.0 wheel)
DENSE_BESIDE_EXPERTS_TYPES = frozenset({"gemma4", "gemma4_text"})


@dataclass(frozen=True)
class LoraBudget:
    """What ``--enable-lora`` adds to a plan (bytes per GPU rank).

    ``slot_bytes`` is the GPU stacks of all slots (``per_slot_bytes`` x ``max_loras``);
    ``activation_bytes`` the profile run's extra; ``cudagraph_factor`` multiplies the CUDA-graph
    estimate and ``cudagraph_band_share`` of the estimate without LoRA widens the band.
    ``failure`` is a refusal vLLM makes before the profile run.
    """

    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int
    dtype_bytes: int
    per_slot_bytes: int
    slot_bytes: int
    activation_bytes: int
    cudagraph_factor: float
    cudagraph_band_share: float
    lm_head_wrapped: bool
    failure: Failure | None
    note: str


def _linear(r: int, a_in: int, b_out: int) -> int:
    """Elements of one slice's A (r x a_in) and B (b_out x r) stacks for one slot."""
    return r * a_in + b_out * r


def per_slot_elements(model: ModelSpec, rank: int, tensor_parallel_size: int = 1,
                      *, vllm_version: str | None = None, fully_sharded: bool = False) -> int:
    """Elements of one adapter slot's GPU stacks across the model (per rank).

    Attention layers are sized as ``qkv_proj`` + ``o_proj`` (an MLA or linear-attention layer
    has other projections; their stacks are approximated by these), dense MLPs as
    ``gate_up_proj`` + ``down_proj``, MoE layers by their experts, router and shared experts
    (and Gemma 4's dense MLP beside them, :data:`DENSE_BESIDE_EXPERTS_TYPES`).
    ``fully_sharded`` is ``--fully-sharded-loras``: under tensor parallelism the A stacks of
    column-parallel layers hold ``rank / tp`` rows and the B stacks of row-parallel layers
    ``hidden / tp`` (``base_linear.py`` / ``column_parallel_linear.py`` ``create_lora_weights``,
    ``fused_moe.py`` w13 A and w2 B; the same in the 0.20.0 and 0.32.0 wheels).
    """
    t = max(1, tensor_parallel_size)
    h = model.hidden_size
    col_a = rank // t if fully_sharded else rank  # rows of a column-parallel A stack
    row_b = h // t if fully_sharded else h  # rows of a row-parallel B stack
    q = model.num_attention_heads * model.head_dim // t
    kvd = kv.kv_heads_per_rank(model, t) * model.head_dim
    attn = 3 * col_a * h + _linear(rank, 0, q) + 2 * _linear(rank, 0, kvd)
    attn += _linear(rank, q, row_b)
    if model.moe is not None:
        e = model.moe.num_experts
        inter = (model.moe.moe_intermediate_size or model.intermediate_size or 4 * h) // t
        mlp = e * (2 * col_a * h + rank * inter + 2 * inter * rank + row_b * rank)
        mlp += _linear(rank, h, e)
        if model.moe.num_shared_experts:
            shared = inter * model.moe.num_shared_experts
            mlp += 2 * col_a * h + 2 * shared * rank + _linear(rank, shared, row_b)
        if model.model_type in DENSE_BESIDE_EXPERTS_TYPES and model.intermediate_size:
            dense = model.intermediate_size // t
            mlp += 2 * col_a * h + 2 * dense * rank + _linear(rank, dense, row_b)
    else:
        inter = (model.intermediate_size or 4 * h) // t
        mlp = 2 * col_a * h + 2 * inter * rank + _linear(rank, inter, row_b)
    total = model.num_hidden_layers * (attn + mlp)
    if model.architecture in LM_HEAD_LORA_ARCHITECTURES:
        vocab = model.vocab_size
        if supports("lora_extra_vocab", vllm_version):
            head_rows = math.ceil((vocab + OLD_EXTRA_VOCAB) / OLD_VOCAB_PADDING) * OLD_VOCAB_PADDING
            total += _linear(rank, h, head_rows) + (vocab + OLD_EXTRA_VOCAB) * rank + h * rank
        else:
            total += _linear(rank, h, vocab) + vocab * rank + h * rank
    return total


def lora_budget(
    model: ModelSpec,
    *,
    max_loras: int | None,
    max_lora_rank: int | None,
    max_cpu_loras: int | None,
    lora_dtype: str | None,
    max_num_batched_tokens: int,
    tensor_parallel_size: int = 1,
    vllm_version: str | None = None,
    cudagraphs_on: bool = True,
    serve_dtype: str | None = None,
    fully_sharded: bool = False,
) -> LoraBudget:
    """The LoRA terms of a plan with ``--enable-lora`` (see the module docstring).

    ``serve_dtype`` is ``--dtype`` (None: the checkpoint's, as vLLM serves it); ``lora_dtype``
    "auto" follows it. ``fully_sharded`` is ``--fully-sharded-loras`` (see
    :func:`per_slot_elements`).

    Raises:
        FitError: a slot count below 1 or an unknown ``lora_dtype``.
    """
    slots = DEFAULT_MAX_LORAS if max_loras is None else max_loras
    rank = DEFAULT_MAX_LORA_RANK if max_lora_rank is None else max_lora_rank
    if slots < 1:
        raise FitError(f"--max-loras must be at least 1, got {slots}")
    cpu = slots if max_cpu_loras is None else max_cpu_loras
    dtype = (lora_dtype or "auto").lower()
    if dtype == "auto":
        served = serve_dtype if serve_dtype and serve_dtype != "auto" else kv.serving_dtype(
            model.torch_dtype)
        elem = kv.dtype_bytes(served)
    elif dtype in ("float16", "bfloat16", "half"):
        elem = 2
    else:
        raise FitError(f"--lora-dtype must be auto, float16 or bfloat16, got {lora_dtype!r}")
    per_slot = per_slot_elements(model, rank, tensor_parallel_size, vllm_version=vllm_version,
                                 fully_sharded=fully_sharded) * elem
    slot_bytes = per_slot * slots
    if supports("lora_extra_vocab", vllm_version) and (
            model.architecture in LM_HEAD_LORA_ARCHITECTURES):
        slot_bytes += slots * OLD_EXTRA_VOCAB * model.hidden_size * 2
    tokens = math.ceil(max_num_batched_tokens / 8) * 8
    # the qkv shrink buffer (3 slices, fp32) and five int64 Punica index rows per token
    activation = 3 * tokens * rank * 4 + 5 * tokens * 8
    failure: Failure | None = None
    wrapped = model.architecture in LM_HEAD_LORA_ARCHITECTURES
    ranks = allowed_ranks(vllm_version)
    limit = OLD_MAX_LORA_VOCAB if supports("lora_extra_vocab", vllm_version) else MAX_LORA_VOCAB
    if rank not in ranks:
        failure = Failure(
            failures.BAD_FLAG_VALUE,
            f"--max-lora-rank {rank} is not one vLLM accepts; use one of "
            + ", ".join(str(r) for r in ranks) + ".",
        )
    elif fully_sharded and rank % max(1, tensor_parallel_size):
        failure = Failure(
            failures.BAD_FLAG_VALUE,
            f"with --fully-sharded-loras vLLM splits the rank over the {tensor_parallel_size} "
            f"GPUs and {rank} is not divisible by {tensor_parallel_size}; pick a rank that is, "
            "or leave --fully-sharded-loras out.",
        )
    elif cpu < slots:
        failure = Failure(
            failures.BAD_FLAG_VALUE,
            f"max_cpu_loras ({cpu}) must be >= max_loras ({slots}); raise --max-cpu-loras or "
            "lower --max-loras.",
        )
    elif wrapped and model.vocab_size > limit:
        failure = Failure(
            failures.UNSUPPORTED_MODEL,
            f"with LoRA vLLM needs a vocabulary of at most {limit:,} tokens; this "
            f"model has {model.vocab_size:,}.",
        )
    factor = 1.5 if cudagraphs_on else 1.0
    note = (
        f"{slots} slot(s) x rank {rank} x {elem} B: {per_slot / GiB:.3f} GiB per slot "
        "(lora/layers create_lora_weights stacks"
        + (", lm_head and embed_tokens included" if wrapped else "") + ")"
    )
    if cpu > slots:
        note += f"; {cpu} adapters cached in host memory (--max-cpu-loras), no GPU bytes"
    return LoraBudget(
        max_loras=slots, max_lora_rank=rank, max_cpu_loras=cpu, dtype_bytes=elem,
        per_slot_bytes=per_slot, slot_bytes=slot_bytes, activation_bytes=activation,
        cudagraph_factor=factor, cudagraph_band_share=0.5 if cudagraphs_on else 0.0,
        lm_head_wrapped=wrapped, failure=failure, note=note,
    )
