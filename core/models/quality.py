"""Published quality figures per model and use case (``resources/quality.json``).

Each use case ranks by one benchmark and version (:func:`benchmark_for`): the Artificial
Analysis Intelligence Index v4.0 for chat, long documents and batch, SWE-bench Verified for
coding. A checkpoint's figure (:func:`figure_for`) is its base model's published score in that
benchmark, times its quantizer's published recovery where one was read (a ratio, 1.0 = no
loss); a checkpoint with no figure in the use case's benchmark is *unrated* and the recommender
ranks it after every rated plan (:data:`UNRATED`). Every figure names its source and date.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from kvpilot.core.base.errors import ModelSpecError

QUALITY_RESOURCE = "quality.json"
UNRATED = "unrated"


@dataclass(frozen=True)
class QualityFigure:
    """A checkpoint's quality in one use case's benchmark.

    ``score`` is on the benchmark's scale (None: unrated), already times ``recovery`` for a
    quantized upload; ``raw_score`` is the base model's published figure; ``benchmark`` the
    benchmark's name with its version ("unrated" when there is no figure); ``source`` and
    ``date`` where the figure was published; ``recovery_note`` how a quantized upload's figure
    was derived ("" for the base checkpoint).
    """

    score: float | None
    benchmark: str
    source: str
    date: str
    raw_score: float | None = None
    recovery: float | None = None
    recovery_note: str = ""

    @property
    def rated(self) -> bool:
        """A published figure backs this checkpoint in the use case's benchmark."""
        return self.score is not None

    def to_json(self) -> dict[str, Any]:
        """``{"score", "benchmark", "source", "date"}`` plus how it was derived."""
        return {"score": None if self.score is None else round(self.score, 2),
                "benchmark": self.benchmark, "source": self.source, "date": self.date or None,
                "rated": self.rated, "raw_score": self.raw_score, "recovery": self.recovery,
                "recovery_note": self.recovery_note or None}


def unrated(why: str) -> QualityFigure:
    """The figure of a checkpoint no published evaluation covers (``why`` says so)."""
    return QualityFigure(None, UNRATED, why, "")


@lru_cache(maxsize=1)
def quality_table() -> dict[str, Any]:
    """The bundled ``quality.json``.

    Raises:
        ModelSpecError: the resource is missing or not JSON (a packaging error).
    """
    try:
        text = resources.files("kvpilot.resources").joinpath(QUALITY_RESOURCE).read_text(
            encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as err:
        raise ModelSpecError(f"the quality table cannot be read ({err})",
                             path=QUALITY_RESOURCE) from err
    if not isinstance(data, dict):
        raise ModelSpecError("the quality table is not a JSON object", path=QUALITY_RESOURCE)
    return data


def benchmark_for(use_case: str) -> tuple[str, str]:
    """(key, name with version) of the benchmark ``use_case`` ranks by ("", "") if none."""
    table = quality_table()
    key = str(table.get("use_cases", {}).get(use_case, ""))
    bench = table.get("benchmarks", {}).get(key, {})
    return key, str(bench.get("name", key))


def _lower_keys(raw: dict[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in raw.items()}


def figure_for(repo: str, use_case: str, base_id: str | None = None) -> QualityFigure:
    """The quality figure of checkpoint ``repo`` for ``use_case``.

    ``base_id`` is the catalog entry the checkpoint belongs to (its base model) when the
    checkpoint is one of that entry's quantized uploads; a stand-alone upload names its base
    in the table's ``uploads``.
    """
    table = quality_table()
    key, name = benchmark_for(use_case)
    if not key:
        return unrated(f"the use case {use_case!r} names no benchmark")
    uploads = _lower_keys(table.get("uploads", {}))
    figures = _lower_keys(table.get("figures", {}))
    upload = uploads.get(repo.lower())
    base = str(upload["base"]) if upload else (base_id or repo)
    recovery: float | None = None
    note = ""
    if upload:
        recovery = upload.get("recovery")
        note = str(upload.get("source", ""))
    elif base.lower() != repo.lower():
        note = (f"a quantized upload of {base}: no recovery published for it was read, so the "
                "base model's figure is used unchanged")
    for row in figures.get(base.lower(), ()):
        if row.get("benchmark") == key:
            raw = float(row["score"])
            score = raw * float(recovery) if recovery else raw
            return QualityFigure(score, name, str(row.get("source", "")),
                                 str(row.get("date", "")), raw, recovery, note)
    return unrated(f"no published {name} figure for {base} was found")
