"""The events the log scanner emits (:mod:`kvpilot.core.vllm.logparse`): a start-up phase,
capacity figures, a stats line, a readiness hint, a shutdown; failures are
:class:`kvpilot.core.base.failures.Failure`."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from kvpilot.core.base.failures import Failure


@dataclass(frozen=True)
class PhaseEvent:
    """vLLM entered a start-up phase (one of :data:`PHASES`)."""

    phase: str
    line: str


@dataclass(frozen=True)
class CapacityEvent:
    """Capacity figures read from one line (None = not on this line). Memory in bytes.

    ``max_concurrency`` is vLLM's "Maximum concurrency for ``max_concurrency_at_len`` tokens per
    request"; ``consumed_bytes`` is weights + non-torch memory from the 0.28+ summary line,
    ``num_gpu_blocks`` the KV blocks (V0 and 0.10 lines), ``peak_torch_bytes`` the V0 profile's
    torch peak (pre-0.6.6 line); ``available_kv_bytes`` may be negative (budget exceeded), and
    ``kv_cache_memory_fit_bytes`` / ``kv_cache_memory_full_bytes`` are the two
    ``--kv-cache-memory=`` values it suggests (to fit the requested memory / to use all of it).
    From 0.34, with the extensible KV cache, ``kv_sized_after_warmup`` is True once the final
    size was read, and ``available_kv_bytes`` is that final size.
    """

    weights_bytes: int | None = None
    weights_load_s: float | None = None
    available_kv_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_len: int | None = None
    cudagraph_bytes: int | None = None
    cudagraph_estimate_bytes: int | None = None
    free_at_startup_bytes: int | None = None
    total_bytes: int | None = None
    requested_bytes: int | None = None
    activation_peak_bytes: int | None = None
    non_torch_bytes: int | None = None
    consumed_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_fit_bytes: int | None = None
    kv_cache_memory_full_bytes: int | None = None
    max_model_len: int | None = None
    num_gpu_blocks: int | None = None
    peak_torch_bytes: int | None = None
    #: 0.34's extensible KV cache: the reserved range "Available KV cache memory" names (the
    #: final size then comes in ``available_kv_bytes`` from "Memory after warmup" / "Extended
    #: KV cache to N blocks"), the KV a utilization below 1.0 withholds, and the auto-fitted
    #: length before warm-up (the final one is ``max_model_len``)
    reserved_kv_bytes: int | None = None
    kv_withheld_bytes: int | None = None
    max_model_len_tentative: int | None = None
    kv_sized_after_warmup: bool | None = None
    free_after_warmup_bytes: int | None = None
    line: str = ""

    def merged(self, newer: CapacityEvent) -> CapacityEvent:
        """This reading updated with every figure ``newer`` carries (``line`` from ``newer``)."""
        updates = {
            f.name: getattr(newer, f.name)
            for f in fields(self)
            if getattr(newer, f.name) is not None and f.name != "line"
        }
        return replace(self, line=newer.line or self.line, **updates)

    def figures(self) -> dict[str, Any]:
        """The figures that are set, without ``line``."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "line" and getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class StatsEvent:
    """The periodic "Engine 000: Avg prompt throughput ..." line.

    Fractions are 0-1; ``prefix_hit_frac`` is None when the line has no hit rate;
    ``preemptions`` counts the preemptions in the interval (0 when not printed).
    """

    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    running: int
    waiting: int
    kv_usage_frac: float
    prefix_hit_frac: float | None
    preemptions: int
    line: str = ""


@dataclass(frozen=True)
class ReadyHintEvent:
    """A line that usually means the HTTP server is up (readiness is still ``/health``)."""

    line: str
    url: str | None = None


@dataclass(frozen=True)
class ShutdownEvent:
    """vLLM began shutting down; ``requested`` when a signal / stop request triggered it."""

    line: str
    requested: bool = True


Event = PhaseEvent | CapacityEvent | StatsEvent | Failure | ReadyHintEvent | ShutdownEvent
