"""The start-up phases of a vLLM server, in order (what :mod:`kvpilot.core.vllm.logparse` reads
from its log). A module of its own so that the GUI names them without loading the log parser
and its pattern tables at start-up; ``logparse`` re-exports them."""

from __future__ import annotations

RESOLVING = "resolving"
DOWNLOADING = "downloading"
LOADING_WEIGHTS = "loading_weights"
PROFILING = "profiling"
KV_CACHE_ALLOCATED = "kv_cache_allocated"
COMPILING = "compiling"
CAPTURING_CUDA_GRAPHS = "capturing_cuda_graphs"
STARTING_API = "starting_api"

PHASES: tuple[str, ...] = (
    RESOLVING,
    DOWNLOADING,
    LOADING_WEIGHTS,
    PROFILING,
    KV_CACHE_ALLOCATED,
    COMPILING,
    CAPTURING_CUDA_GRAPHS,
    STARTING_API,
)
