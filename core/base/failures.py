"""Failure kinds shared by the fit engine (predicted) and the supervisor (observed).

One vocabulary for both sides, so that a predicted failure and a classified log failure can be
compared and the fallback engine can answer either. Values are stable strings (they appear in
``--json`` output and ``--json-events``). :class:`Failure` is the one failure type: the fit
engine predicts it, the log scanner and the supervisor observe it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Failure:
    """A start-up or serving failure in vLLM's own terms, predicted or observed.

    ``kind`` is one of the constants below; ``message`` one sentence for the user;
    ``estimated_max_model_len`` vLLM's own estimate when the KV cache is too small for the
    context (tokens; None otherwise). An observed failure also carries the log ``line`` it was
    read from and ``details``, the numbers parsed from it (bytes, tokens, flags) for the
    fallback engine; a predicted one leaves both empty.
    """

    kind: str
    message: str
    estimated_max_model_len: int | None = None
    line: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

# "To serve at least one request with the model's max seq len ..."
KV_CACHE_TOO_SMALL = "kv_cache_too_small"
NO_KV_MEMORY = "no_kv_memory"  # "No available memory for the cache blocks"
# "Available KV cache memory: -8.59 GiB": weights + activations (+ what another process on the GPU
# took while vLLM profiled) exceed the requested budget; the fix is a utilization that covers
# them or freeing the GPU, not a shorter context
NEGATIVE_KV_BUDGET = "negative_kv_budget"
# "Free memory on device ... is less than desired GPU memory utilization"
FREE_MEMORY_BELOW_UTILIZATION = "free_memory_below_utilization"
CUDA_OOM_LOADING = "cuda_oom_loading"  # CUDA out of memory while loading weights
CUDA_OOM_GRAPHS = "cuda_oom_graphs"  # CUDA out of memory while profiling / capturing CUDA graphs
CUDA_OOM_SERVING = "cuda_oom_serving"  # CUDA out of memory after the server was ready
UNSUPPORTED_KV_DTYPE = "unsupported_kv_dtype"  # fp8 KV below SM89, bf16 KV below SM80, no backend
UNSUPPORTED_QUANTIZATION = "unsupported_quantization"  # method needs a newer compute capability
UNSUPPORTED_MODEL = "unsupported_model"  # no attention backend for this head size / model
MODEL_NOT_FOUND = "model_not_found"
GATED_REPO = "gated_repo"
MAX_MODEL_LEN_ABOVE_MODEL = "max_model_len_above_model"  # "User-specified max_model_len ..."
PORT_IN_USE = "port_in_use"
UNKNOWN_FLAG = "unknown_flag"  # argparse "unrecognized arguments"
BAD_FLAG_VALUE = "bad_flag_value"  # argparse "invalid ... value" / pydantic range errors
ENGINE_DIED = "engine_died"  # EngineDeadError / health 503 after ready
SERVER_HUNG = "server_hung"  # alive, but /health unanswered for longer than the hung limit
STARTUP_TIMEOUT = "startup_timeout"
UNKNOWN = "unknown"
# "max_num_seqs (N) exceeds available Mamba cache blocks (M)": a hybrid linear-attention model
# with full CUDA graphs needs one block of the pool per decoding sequence
MAMBA_CACHE_BLOCKS = "mamba_cache_blocks"

ALL_KINDS: tuple[str, ...] = (
    KV_CACHE_TOO_SMALL,
    NO_KV_MEMORY,
    NEGATIVE_KV_BUDGET,
    FREE_MEMORY_BELOW_UTILIZATION,
    CUDA_OOM_LOADING,
    CUDA_OOM_GRAPHS,
    CUDA_OOM_SERVING,
    UNSUPPORTED_KV_DTYPE,
    UNSUPPORTED_QUANTIZATION,
    UNSUPPORTED_MODEL,
    MODEL_NOT_FOUND,
    GATED_REPO,
    MAX_MODEL_LEN_ABOVE_MODEL,
    PORT_IN_USE,
    UNKNOWN_FLAG,
    BAD_FLAG_VALUE,
    ENGINE_DIED,
    SERVER_HUNG,
    STARTUP_TIMEOUT,
    UNKNOWN,
    MAMBA_CACHE_BLOCKS,
)
