"""A deployment plan (what would be passed to ``vllm serve``) and its predicted capacity.

:class:`PlanInputs` is everything that decides how vLLM sizes memory; :class:`Capacity` is the
budget computed from it by :func:`kvpilot.core.fit.budget.compute_capacity`, every term in bytes
and each with the place it came from, so that a user interface can show and explain it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvpilot.core.models.spec import ModelSpec

GiB = 1 << 30
MiB = 1 << 20

#: term sources (``BudgetTerm.source``)
FROM_FILE = "file"  # read from the checkpoint on disk
FROM_CATALOG = "catalog"
FROM_MODEL = "model"  # kvpilot's model of vLLM (this module's arithmetic)
FROM_DEFAULT = "default"  # a vLLM default for this version / GPU
FROM_USER = "user"  # given explicitly
FROM_MEASURED = "measured"  # reported by vLLM in an earlier launch on this GPU

#: failure kinds, in vLLM's terms (``Failure.kind``): see :mod:`kvpilot.core.failures`


@dataclass(frozen=True)
class PlanInputs:
    """The settings that decide vLLM's memory layout, plus the GPU they run on.

    ``None`` means "let vLLM choose", and the engine fills in that version's default (recorded in
    ``Capacity.inputs``). Memory sizes are bytes per GPU.
    """

    model: ModelSpec
    gpu_total_bytes: int
    gpu_free_bytes: int | None = None
    gpu_name: str = ""
    compute_capability: tuple[int, int] | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    quantization: str | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    enable_prefix_caching: bool = True
    block_size: int | None = None
    vllm_version: str = "0.33.0"


@dataclass(frozen=True)
class BudgetTerm:
    """One line of the memory budget: ``bytes`` (per GPU) and where the figure came from."""

    name: str
    bytes: int
    source: str
    note: str = ""


@dataclass(frozen=True)
class Failure:
    """A startup failure predicted in vLLM's own terms.

    ``kind`` is one of the :mod:`kvpilot.core.failures` constants; ``message`` a sentence for
    the user; ``estimated_max_model_len`` vLLM's own estimate when the KV cache is too small for the
    context (None otherwise).
    """

    kind: str
    message: str
    estimated_max_model_len: int | None = None


@dataclass(frozen=True)
class Capacity:
    """The predicted memory budget and KV capacity of a plan (all memory in bytes per GPU).

    ``kv_cache_tokens`` and ``max_concurrency`` are what vLLM logs as "KV cache size: N tokens,
    Maximum concurrency for L tokens per request: Cx"; ``fits`` is False when vLLM would refuse
    to start, and ``failure`` then says why.
    """

    requested_bytes: int
    weights_bytes: int
    non_torch_bytes: int
    activation_peak_bytes: int
    cudagraph_bytes: int
    available_kv_bytes: int
    kv_bytes_per_token: int
    page_bytes_per_block: int
    block_size: int
    num_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    kv_cache_dtype: str
    fits: bool
    failure: Failure | None
    terms: tuple[BudgetTerm, ...]
    inputs: dict[str, Any] = field(default_factory=dict)
    headroom_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the ``kvpilot plan --json`` object)."""
        data = asdict(self)
        data["terms"] = [asdict(t) for t in self.terms]
        return data
