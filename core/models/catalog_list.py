"""What the recommender ranks, as a list: ``kvpilot catalog`` and any window that shows it.

:func:`catalog_listing` is the one function: every catalog entry with its family, release date
and checkpoints (quantization scheme, weight bytes and where they came from), and, for a given
GPU, which checkpoints its compute capability refuses and why
(:mod:`~kvpilot.core.models.checkpoint_rules`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvpilot.core.base.model_spec import Quantization
from kvpilot.core.models.catalog import CatalogEntry, catalog_entries
from kvpilot.core.models.checkpoint_rules import (
    SizedCheckpoint,
    caveat,
    refusal,
    scheme_of_quantization,
)


@dataclass(frozen=True)
class ListedCheckpoint(SizedCheckpoint):
    """One catalog checkpoint, sized (weight bytes None: the entry's note says why; source
    ``catalog`` exact or listed, ``estimate`` byte model), with its vLLM quantization
    ``method`` (None: 16-bit) and ``bits``."""

    method: str | None = None
    bits: int | None = None


@dataclass(frozen=True)
class ListedModel:
    """One catalog entry as listed: the entry (id, family, release date and its source,
    parameters, context, license) with its checkpoints as listed for the GPU."""

    entry: CatalogEntry
    checkpoints: tuple[ListedCheckpoint, ...]


def _listed(entry: CatalogEntry, cc: tuple[int, int] | None) -> ListedModel:
    rows = []
    for c in entry.checkpoints:
        quant = Quantization(c.method, c.bits, c.group_size) if c.method else None
        scheme = scheme_of_quantization(quant)
        rows.append(ListedCheckpoint(c.repo, scheme, c.weights_bytes or None, c.weights_source,
                                     refusal(scheme, cc) or "", caveat(scheme, cc),
                                     method=c.method, bits=c.bits))
    return ListedModel(entry, tuple(rows))


def catalog_listing(
    compute_capability: tuple[int, int] | None = None, family: str | None = None
) -> tuple[ListedModel, ...]:
    """Every catalog model in catalog order (only ``family`` when given, any case), with the
    checkpoints a GPU of ``compute_capability`` refuses marked.

    Raises:
        ModelSpecError: the bundled catalog cannot be read (a packaging error).
    """
    wanted = family.lower() if family else None
    return tuple(
        _listed(e, compute_capability) for e in catalog_entries()
        if wanted is None or e.family.lower() == wanted
    )


def _model_json(m: ListedModel) -> dict[str, Any]:
    e = m.entry
    return {
        "id": e.id, "family": e.family, "release_date": e.release_date or None,
        "release_date_source": e.release_date_source or None,
        "params_total": e.params_total, "context_length": e.context_length,
        "license": e.license, "gated": e.gated,
        "checkpoints": [
            {"repo": c.repo, "quantization": c.method, "scheme": c.scheme, "bits": c.bits,
             "weights_bytes": c.weights_bytes, "weights_source": c.weights_source,
             "refused": c.refused or None, "note": c.note or None}
            for c in m.checkpoints
        ],
    }


def listing_to_json(models: tuple[ListedModel, ...]) -> list[dict[str, Any]]:
    """The JSON form (``kvpilot catalog --json``)."""
    return [_model_json(m) for m in models]
