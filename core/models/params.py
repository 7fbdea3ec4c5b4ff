"""Parameters of a text model split by how quantization treats them (shared by the byte
model's rules in :mod:`.bytemodel` and :mod:`.bytemodel_hybrid`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Linear:
    """``count`` identical projections of ``in_features`` x ``out_features`` (quantizable).

    ``name`` is the projection's module name inside a decoder layer (``self_attn.q_proj``), or in
    the text model where ``layers`` is empty (``per_layer_model_projection``); ``layers`` are the
    indices of the decoder layers holding it, ``count // len(layers)`` in each (experts: the
    expert count). An ignore list (:mod:`.quant_ignore`) is matched against these names; an
    unnamed projection is always quantized.
    """

    in_features: int
    out_features: int
    count: int = 1
    is_expert: bool = False
    name: str = ""
    layers: tuple[int, ...] = ()


def named_linears(k: int, n: int, names: tuple[str, ...], layers: tuple[int, ...], per: int = 1,
                  is_expert: bool = False) -> list[Linear]:
    """One projection of ``k`` x ``n`` per name, ``per`` of them in each of ``layers``."""
    return [Linear(k, n, per * len(layers), is_expert, name, layers) for name in names]


@dataclass(frozen=True)
class ParamBreakdown:
    """Parameters of a text model split by how quantization treats them.

    ``linears`` are quantizable projections; ``dense16_params`` are parameters that every method
    keeps 16-bit (embeddings, lm_head, norms, biases, routers, attention sinks).
    """

    linears: tuple[Linear, ...]
    dense16_params: int
    embedding_params: int
    lm_head_params: int

    @property
    def linear_params(self) -> int:
        return sum(x.in_features * x.out_features * x.count for x in self.linears)

    @property
    def total_params(self) -> int:
        return self.linear_params + self.dense16_params

    def active_params(self, moe_fraction: float) -> int:
        """Parameters used per token when experts are used with ``moe_fraction`` of their count."""
        expert = sum(x.in_features * x.out_features * x.count for x in self.linears if x.is_expert)
        return int(self.total_params - expert * (1.0 - moe_fraction))
