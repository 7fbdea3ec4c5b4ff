"""Where a supervised vLLM server is: its state (:class:`SupervisorState`, what the supervisor
reports) and its start-up phases in order (what :mod:`kvpilot.core.vllm.logparse` reads from its
log). Vocabulary of the supervisor, the run records, both faces and the window's panels, which
name them without loading the supervisor or the log parser and its pattern tables at start-up;
``logparse`` re-exports the phases."""

from __future__ import annotations

from enum import StrEnum


class SupervisorState(StrEnum):
    """Where a supervised server is (:attr:`kvpilot.core.vllm.supervisor.Supervisor.state`,
    ``StateEvent.state``)."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


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
