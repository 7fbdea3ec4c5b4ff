"""``--cpu-offload-gb``: the weights vLLM keeps in pinned host memory instead of on the GPU.

vLLM's UVA offloader (``model_executor/offloader/uva.py``, 0.29.0 wheel) walks the decoder
layers in order and moves their parameters to pinned host memory one whole parameter at a time
until the offloaded bytes reach ``cpu_offload_gb`` GiB per GPU; the embedding and the output
head stay on the GPU. ``Model loading took`` is then the rest. The last parameter moved may
overshoot the budget; kvpilot counts the budget itself (the overshoot is under one
parameter, a few MiB on the models a workstation serves).
"""

from __future__ import annotations

import math

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.activation import activation_bytes_per_element


def decoder_layer_bytes(model: ModelSpec, weights_per_rank_bytes: int,
                        tensor_parallel_size: int = 1) -> int:
    """Bytes per rank the offloader may move: the weights less the embedding and, when not
    tied, the output head (16-bit rows of ``vocab x hidden``, split over the ranks)."""
    tp = max(1, tensor_parallel_size)
    row = model.vocab_size * model.hidden_size * activation_bytes_per_element(None)
    heads = row * (1 if model.tie_word_embeddings else 2)
    return max(0, weights_per_rank_bytes - math.ceil(heads / tp))


def offloaded_bytes(model: ModelSpec, cpu_offload_gb: float | None,
                    weights_per_rank_bytes: int, tensor_parallel_size: int = 1) -> int:
    """Bytes per GPU that ``--cpu-offload-gb`` takes off the GPU (0 without it).

    Raises:
        FitError: a negative ``cpu_offload_gb``.
    """
    if cpu_offload_gb is None or cpu_offload_gb == 0:
        return 0
    if cpu_offload_gb < 0:
        raise FitError(f"--cpu-offload-gb must be 0 or more GiB, got {cpu_offload_gb}")
    budget = int(cpu_offload_gb * GiB)
    return min(budget, decoder_layer_bytes(model, weights_per_rank_bytes, tensor_parallel_size))
