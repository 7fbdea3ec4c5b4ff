"""GPU memory the V2 model runner's sampler keeps for every request slot, from start-up on.

The V2 runner (``v1/worker/gpu/``, :mod:`kvpilot.core.fit.runner`) builds a ``Sampler`` in
``load_model`` (``model_runner.py`` 0.26.0 l. 328, 0.27.x l. 352, 0.28.0 l. 398), after the
weights are measured (l. 304 / 328 / 379), whose ``PenaltiesState`` allocates on the GPU whether
or not a request ever asks for a penalty (``sample/penalties.py`` l. 32-42 in the 0.26.0, 0.27.x
and 0.28.0 wheels):

* ``output_bin_counts``: int32 ``[max_num_reqs, vocab_size]``;
* ``prompt_bin_mask``: int32 ``[max_num_reqs, ceil(vocab_size / 32)]``.

Whether the KV budget holds them depends on the release's profiler:

* 0.26.0 takes the weights, the memory outside torch and the profile window's torch peak above
  what was allocated on entry (``v1/worker/gpu_worker.py`` l. 509-516): tensors made between
  loading and the profile are in no term, so the tables sit outside the budget;
* from 0.27 the budget takes the fall of free memory since the worker's first snapshot
  (``utils/mem_utils.py`` ``memory_profiling`` l. 317-326, ``total_consumed``, logged as
  "consumed memory (weights + non-torch)"), which holds them.

The request states' token table (``states.py`` ``all_token_ids``, ``[max_num_reqs,
max_model_len]``) is host memory (``uva_instead_of_gpu``) and costs the GPU nothing; the V1
runner keeps no per-vocabulary table on the GPU.

The plan counts the tables wherever vLLM's budget holds them (0.27+ on the V2 runner), beside
the rest of that budget as vLLM takes it: the graphs outside it before 0.29
(:func:`kvpilot.core.fit.runner.graphs_outside_budget`) and a first compile's benchmark in the
profiled peak (:mod:`kvpilot.core.fit.compile_charge`).
"""

from __future__ import annotations

import math

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import Release
from kvpilot.core.fit import runner

#: bytes of one int32 element
_INT32_BYTES = 4
#: bits packed in one int32 word of the prompt mask
_MASK_BITS = 32
#: first release whose budget holds the tables (``total_consumed``)
IN_BUDGET_SINCE = "0.27"


def penalty_state_bytes(*, max_num_seqs: int, vocab_size: int) -> int:
    """``output_bin_counts`` plus ``prompt_bin_mask`` (bytes, each rank that samples).

    Raises:
        ValueError: for a negative ``max_num_seqs`` or ``vocab_size``.
    """
    if max_num_seqs < 0 or vocab_size < 0:
        raise ValueError("max_num_seqs and vocab_size must not be negative")
    counts = max_num_seqs * vocab_size * _INT32_BYTES
    mask = max_num_seqs * math.ceil(vocab_size / _MASK_BITS) * _INT32_BYTES
    return counts + mask


def budget_bytes(model: ModelSpec, inputs: PlanInputs, *, max_num_seqs: int) -> int:
    """The tables as the plan counts them in the KV budget (bytes per rank).

    0 where the V1 runner runs the model, before 0.27 (outside vLLM's budget) and for pooling
    runs (no sampler).
    """
    if (not runner.uses_v2_runner(model, inputs) or inputs.runner == "pooling"
            or not Release.parse(inputs.vllm_version).at_least(IN_BUDGET_SINCE)):
        return 0
    return penalty_state_bytes(max_num_seqs=max_num_seqs, vocab_size=model.vocab_size)


def note(tables_bytes: int) -> str:
    """The non-torch term's words for the tables (empty where none are counted)."""
    if tables_bytes <= 0:
        return ""
    return (f", plus {tables_bytes / GiB:.2f} GiB of the V2 sampler's penalty tables "
            "(v1/worker/gpu/sample/penalties.py PenaltiesState, in utils/mem_utils.py "
            "total_consumed)")
