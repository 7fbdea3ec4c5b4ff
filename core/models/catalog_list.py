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
    """One catalog entry as listed."""

    id: str
    family: str
    release_date: str
    params_total: int
    context_length: int
    license: str
    gated: bool
    checkpoints: tuple[ListedCheckpoint, ...]
    #: where the release date was read ("date unknown: ..." when none was)
    release_date_source: str = ""


def _listed(entry: CatalogEntry, cc: tuple[int, int] | None) -> ListedModel:
    rows = []
    for c in entry.checkpoints:
        quant = Quantization(c.method, c.bits, c.group_size) if c.method else None
        scheme = scheme_of_quantization(quant)
        rows.append(ListedCheckpoint(c.repo, scheme, c.weights_bytes or None, c.weights_source,
                                     refusal(scheme, cc) or "", caveat(scheme, cc),
                                     method=c.method, bits=c.bits))
    return ListedModel(entry.id, entry.family, entry.release_date, entry.params_total,
                       entry.context_length, entry.license, entry.gated, tuple(rows),
                       entry.release_date_source)


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


def listing_to_json(models: tuple[ListedModel, ...]) -> list[dict[str, Any]]:
    """The JSON form (``kvpilot catalog --json``)."""
    return [
        {
            "id": m.id, "family": m.family, "release_date": m.release_date or None,
            "release_date_source": m.release_date_source or None,
            "params_total": m.params_total, "context_length": m.context_length,
            "license": m.license, "gated": m.gated,
            "checkpoints": [
                {"repo": c.repo, "quantization": c.method, "scheme": c.scheme, "bits": c.bits,
                 "weights_bytes": c.weights_bytes, "weights_source": c.weights_source,
                 "refused": c.refused or None, "note": c.note or None}
                for c in m.checkpoints
            ],
        }
        for m in models
    ]
