"""The small KV cache vLLM allocates to measure its CUDA graphs, before the real one is sized.

From vLLM 0.20 the V1 model runner estimates the graph pool inside the memory profile
(``determine_available_memory`` calls ``profile_cudagraph_memory``), and capturing needs a KV
cache to exist. ``GPUModelRunner._init_minimal_kv_cache_for_profiling``
(``v1/worker/gpu_model_runner.py``) therefore allocates ``max_cudagraph_capture_size or 1``
blocks of every KV cache group (0.20.0 and 0.24.0 wheels), from 0.26 ``min(max_num_reqs,
max_cudagraph_capture_size) or 1`` (one block per sequence a graph may hold; 0.26.0, 0.28.0 and
0.32.0 wheels; 0.25 was not read), through ``num_gpu_blocks_override``, captures the first
graphs of each mode, and frees it (``_cleanup_profiling_kv_cache``). The cache lives next to the
weights and the non-torch memory, and the torch cache is emptied before the capture, so the
allocation needs ``blocks x page bytes`` free on the device: a plan that fits the utilization
budget can still run out of memory here when blocks are large (hybrid models, whose attention
block is widened to the Mamba state's page) and ``--max-num-seqs`` is high. The V2 runner
makes no graph estimate before 0.29 (``profile_cudagraph_memory`` returns 0, 0.26.0 and 0.28.0
wheels) and so no such cache; from 0.29 it builds the same one
(``v1/worker/gpu/cudagraph_utils.py``, read in the 0.32.0 wheel).

The plan checks it from 0.26 only: the older count (the capture size alone) would refuse
hybrid start-ups on 24-32 GB cards with 0.20-0.25 that public reports show starting, so that
rule waits for a log that settles it.

``max_cudagraph_capture_size`` by default is ``min(max_num_seqs x (1 + num_speculative_tokens)
x 2, 512)`` (1024 on SM 10.x), capped at ``max_num_batched_tokens``
(``VllmConfig._set_cudagraph_sizes``, ``config/vllm.py``, 0.28.0).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.speculative_config import speculative_settings
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import Release
from kvpilot.core.fit.activation import largest_default_capture
from kvpilot.core.fit.budget_now import CUDA_CONTEXT_BYTES

#: first release that caps the block count at max_num_seqs (read in 0.26.0; 0.24.0 does not)
CAPPED_AT_SEQUENCES_FROM = "0.26"
#: from 0.34 the extensible KV cache replaces the utilization budget (extensible_kv.py)
LAST_RELEASE_BEFORE = "0.34"


@dataclass(frozen=True)
class ProfilingKv:
    """The profiling KV cache of one start-up: ``blocks`` blocks of ``bytes_per_block`` bytes
    (all layers of all groups), ``total_bytes`` their product."""

    blocks: int
    bytes_per_block: int

    @property
    def total_bytes(self) -> int:
        return self.blocks * self.bytes_per_block


def applies(vllm_version: str | None, *, enforce_eager: bool, cudagraph_mode: str | None) -> bool:
    """Whether the plan checks the profiling KV cache: 0.26 to 0.33, graphs captured (vLLM
    builds it from 0.20; see the module's note on 0.20-0.25)."""
    if enforce_eager or (cudagraph_mode or "").upper() == "NONE":
        return False
    v = Release.parse(vllm_version)
    return v.at_least(CAPPED_AT_SEQUENCES_FROM) and not v.at_least(LAST_RELEASE_BEFORE)


def max_capture_size(
    *,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    num_speculative_tokens: int = 0,
    largest_default: int = 512,
    capture_size: int | None = None,
) -> int:
    """vLLM's ``max_cudagraph_capture_size`` (tokens): the given one, else the default above,
    each capped at ``max_num_batched_tokens``.

    Raises:
        ValueError: for a non-positive ``max_num_seqs`` or ``max_num_batched_tokens``.
    """
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
    size = capture_size
    if size is None:
        size = min(max_num_seqs * (1 + num_speculative_tokens) * 2, largest_default)
    return max(1, min(max_num_batched_tokens, size))


def profiling_kv(*, max_num_seqs: int, capture_size_tokens: int, bytes_per_block: int,
                 capped_at_sequences: bool = True) -> ProfilingKv:
    """The minimal cache: ``min(max_num_seqs, capture size) or 1`` blocks, or the capture size
    alone where ``capped_at_sequences`` is False (before 0.26).

    Raises:
        ValueError: for a negative ``bytes_per_block``.
    """
    if bytes_per_block < 0:
        raise ValueError("bytes_per_block must not be negative")
    blocks = (min(max_num_seqs, capture_size_tokens) if capped_at_sequences
              else capture_size_tokens) or 1
    return ProfilingKv(blocks=blocks, bytes_per_block=bytes_per_block)


def out_of_memory(cache: ProfilingKv, *, resident_bytes: int, device_free_bytes: int
                  ) -> Failure | None:
    """The failure when ``resident_bytes`` (weights and non-torch memory) plus the profiling
    cache exceed ``device_free_bytes`` (what vLLM can allocate at launch); None otherwise."""
    need = resident_bytes + cache.total_bytes
    if need <= device_free_bytes:
        return None
    return Failure(
        failures.CUDA_OOM_GRAPHS,
        f"vLLM allocates {cache.blocks:,} KV blocks ({cache.total_bytes / GiB:.2f} GiB) to "
        f"measure its CUDA graphs; with the weights and overheads "
        f"({resident_bytes / GiB:.2f} GiB) that is {need / GiB:.2f} GiB, more than the "
        f"{device_free_bytes / GiB:.2f} GiB it can use; lower --max-num-seqs, or use "
        "--enforce-eager.",
    )


def startup_failure(inputs: PlanInputs, *, estimates: bool, bytes_per_block: int,
                    max_num_seqs: int, max_num_batched_tokens: int, resident_bytes: int
                    ) -> Failure | None:
    """:func:`out_of_memory` for a plan's ``inputs`` (None where the release does not build the
    cache, or where its runner makes no graph estimate: ``estimates`` False, the V2 runner
    before 0.29, whose ``profile_cudagraph_memory`` returns 0 and allocates nothing); the
    device's usable memory is NVML's free figure, else the total, less vLLM's CUDA context."""
    if not estimates or not applies(inputs.vllm_version, enforce_eager=inputs.enforce_eager,
                                    cudagraph_mode=inputs.cudagraph_mode):
        return None
    settings = speculative_settings(inputs.speculative_config)
    spec_tokens = (settings.num_speculative_tokens or 0) if settings is not None else 0
    capture = max_capture_size(
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
        num_speculative_tokens=spec_tokens,
        largest_default=largest_default_capture(inputs.vllm_version, inputs.compute_capability),
        capture_size=inputs.max_cudagraph_capture_size)
    cache = profiling_kv(max_num_seqs=max_num_seqs, capture_size_tokens=capture,
                         bytes_per_block=bytes_per_block)
    free = inputs.gpu_total_bytes if inputs.gpu_free_bytes is None else inputs.gpu_free_bytes
    return out_of_memory(cache, resident_bytes=resident_bytes,
                         device_free_bytes=free - CUDA_CONTEXT_BYTES)
