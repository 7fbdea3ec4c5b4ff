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

#: the phases in the order vLLM goes through them, each with the words shown to the user (the
#: GUI's progress line, ``kvpilot serve``'s phase lines)
PHASE_WORDS: dict[str, str] = {
    RESOLVING: "resolving the model",
    DOWNLOADING: "downloading the model",
    LOADING_WEIGHTS: "loading weights",
    PROFILING: "profiling memory",
    KV_CACHE_ALLOCATED: "allocating the KV cache",
    COMPILING: "compiling the model",
    CAPTURING_CUDA_GRAPHS: "capturing CUDA graphs",
    STARTING_API: "starting the API server",
}
PHASES: tuple[str, ...] = tuple(PHASE_WORDS)


def phase_words(phase: str | None) -> str:
    """The user's words for a phase name (the name with spaces for one not listed, "" for None)."""
    if phase is None:
        return ""
    return PHASE_WORDS.get(phase, phase.replace("_", " "))
