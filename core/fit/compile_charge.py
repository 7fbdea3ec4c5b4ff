"""What a first torch.compile of a model fed token ids adds to vLLM's profiled activation peak.

vLLM 0.12 and later (torch 2.9 pinned from the 0.12.0 wheel; 0.11.0 pins 2.8) set two Inductor
options off the CPU platform, ``combo_kernels`` and ``benchmark_combo_kernel``
(``config/compilation.py`` ``CompilationConfig.__post_init__``: 0.12.0 l. 832-839, 0.28.0
l. 977-986). With them Inductor times the kernels it considers for a combo kernel while it
generates code (``scheduler.py`` ``speedup_by_combo_kernel`` -> ``benchmark_fused_nodes``), on
arguments its benchmark harness allocates at full size on the GPU (``codegen/triton.py``
``codegen_kernel_benchmark``: ``get_args`` makes every buffer and constant with
``rand_strided``; torch 2.13.0).

The code is generated at the model's first call, which vLLM makes inside its memory profile
(``v1/worker/gpu_worker.py`` ``determine_available_memory``: ``profile_run`` within
``memory_profiling``), so the torch peak it charges as activation holds those arguments, taken
before any activation exists: the peak is the larger of the two, not their sum. A model fed
token ids gathers rows of its embedding table in the first compiled piece, and that kernel's
arguments hold the whole table as a rank has it (``VocabParallelEmbedding``: the vocabulary
padded to 64 rows, split over the ranks). A multimodal model gets ``inputs_embeds`` made outside
the compiled graph instead (``v1/worker/gpu/model_runner.py`` 0.28.0 l. 1551-1585:
``dummy_inputs_embeds`` on the profile run), unless every modality's limit is 0
(``multimodal/registry.py`` ``supports_multimodal_inputs``: text-only mode).

The start-ups that log the peak agree: Qwen2.5-7B-AWQ logs 1.04 GiB on an RTX 4080 with 0.26.0
and on an L4 with 0.28.0 (its table: 1.02 GiB; forward and sampler: 0.34), Qwen2.5-0.5B 0.25 GiB
with 0.27.1 at 2,048 tokens (table 0.25, forward and sampler 0.14), while Gemma 4 E4B on an L4
with 0.28.0, fed embeddings and compiled on that boot (torch.compile 68.0 s in its write-up),
logs 0.27 GiB against 0.28 modelled for a 1.25 GiB table. A boot that finds the compile cache
generates no code (vLLM issue 54383: first boots of a shape on 0.28.0 get about 5 % less KV than
repeated ones; the Qwen3-14B-AWQ L4 servers of one write-up, started one after another, 1.23 GiB
apart against a 1.45 GiB table). The plan assumes a first boot, the smaller KV cache.

Not modelled: Gemma 3n / 4's per-layer embedding table, gathered in the same piece in text-only
mode (the spec does not carry its shape), and what later pieces' kernels take.
"""

from __future__ import annotations

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import supports
from kvpilot.core.fit.activation import activation_bytes_per_element

#: VocabParallelEmbedding pads the vocabulary to a multiple of this many rows
VOCAB_PADDING = 64


def feeds_token_ids(model: ModelSpec, inputs: PlanInputs) -> bool:
    """Whether vLLM gives the compiled model token ids (so it gathers the embedding itself):
    text models, and multimodal ones whose every modality limit is 0."""
    return not model.is_multimodal or inputs.mm_limit == 0


def embedding_table_bytes(model: ModelSpec, tensor_parallel_size: int,
                          serve_dtype: str | None = None) -> int:
    """The embedding table one rank holds (bytes): the vocabulary padded to 64, split over the
    ranks, times the hidden size in the serving dtype.

    Raises:
        ValueError: for a tensor-parallel size below 1.
    """
    if tensor_parallel_size < 1:
        raise ValueError("tensor_parallel_size must be at least 1")
    padded = -(-model.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    rows = -(-padded // tensor_parallel_size)
    return rows * model.hidden_size * activation_bytes_per_element(serve_dtype)


def charge_bytes(model: ModelSpec, inputs: PlanInputs) -> int:
    """The peak a first compile's benchmark of the embedding gather holds (bytes per rank); 0
    without a compile (``--enforce-eager``), before 0.12, on the CPU backend (vLLM leaves combo
    kernels off there) and where the model is fed embeddings."""
    if (inputs.enforce_eager or not supports("inductor_combo_benchmark", inputs.vllm_version)
            or inputs.on_cpu_backend or not feeds_token_ids(model, inputs)):
        return 0
    return embedding_table_bytes(model, inputs.tensor_parallel_size, inputs.dtype)


def peak_bytes(activation_bytes: int, model: ModelSpec, inputs: PlanInputs) -> int:
    """The profiled peak with a first compile: the larger of ``activation_bytes`` and the
    benchmark's (they do not overlap in time)."""
    return max(activation_bytes, charge_bytes(model, inputs))


def note(activation_bytes: int, model: ModelSpec, inputs: PlanInputs) -> str:
    """The activation term's words where the compile's benchmark sets the peak (else empty)."""
    charge = charge_bytes(model, inputs)
    if charge <= activation_bytes:
        return ""
    return (f"; a first boot's compile benchmarks the embedding gather on a {charge / GiB:.2f} GiB "
            "copy of the table (Inductor's benchmark_combo_kernel, vLLM 0.12+), which sets the "
            "peak; a compile-cache hit skips it")
