"""Published quality figures per model and use case (``resources/quality.json``).

Each use case ranks by one benchmark and version (:func:`benchmark_for`): the Artificial
Analysis Intelligence Index v4.0 for chat, long documents and batch, SWE-bench Verified for
coding. A checkpoint's figure (:func:`figure_for`) is its base model's published score in that
benchmark, times its quantizer's published recovery where one was read (a ratio, 1.0 = no
loss), else times the recovery one published study measured for its scheme (the table's
``schemes``: FP8, 4-bit integer weights, NVFP4), so an upload whose quantizer published nothing
never keeps more of its base figure than the study found such uploads keep; a checkpoint with
no figure in the use case's benchmark is *unrated* and the recommender ranks it after every
rated plan (:data:`UNRATED`). Every figure names its source and date.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import Quantization
from kvpilot.core.models import checkpoint_rules as rules

QUALITY_RESOURCE = "quality.json"
UNRATED = "unrated"
#: ``recovery_kind`` of a recovery the upload's quantizer published
RECOVERY_QUANTIZER = "quantizer"
#: ``recovery_kind`` of a recovery taken from the per-scheme study (no published one was read)
RECOVERY_SCHEME = "scheme"


@dataclass(frozen=True)
class QualityFigure:
    """A checkpoint's quality in one use case's benchmark.

    ``score`` is on the benchmark's scale (None: unrated), already times ``recovery`` for a
    quantized upload; ``raw_score`` is the base model's published figure; ``benchmark`` the
    benchmark's name with its version ("unrated" when there is no figure); ``source`` and
    ``date`` where the figure was published; ``recovery_note`` how a quantized upload's figure
    was derived ("" for the base checkpoint); ``recovery_kind`` where ``recovery`` comes from:
    :data:`RECOVERY_QUANTIZER`, :data:`RECOVERY_SCHEME` or "" (none: the base figure unchanged).
    """

    score: float | None
    benchmark: str
    source: str
    date: str
    raw_score: float | None = None
    recovery: float | None = None
    recovery_note: str = ""
    recovery_kind: str = ""

    @property
    def rated(self) -> bool:
        """A published figure backs this checkpoint in the use case's benchmark."""
        return self.score is not None

    def to_json(self) -> dict[str, Any]:
        """``{"score", "benchmark", "source", "date"}`` plus how it was derived."""
        return {"score": None if self.score is None else round(self.score, 2),
                "benchmark": self.benchmark, "source": self.source, "date": self.date or None,
                "rated": self.rated, "raw_score": self.raw_score, "recovery": self.recovery,
                "recovery_note": self.recovery_note or None,
                "recovery_kind": self.recovery_kind or None}


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


def study_scheme(quant: Quantization | None) -> str:
    """The key of ``quant``'s scheme in the table's ``schemes`` ("" when the study does not
    cover it: 16-bit, 8-bit integer weights, MXFP4 and unknown methods)."""
    scheme = rules.scheme_of_quantization(quant)
    if scheme in (rules.SCHEME_AWQ, rules.SCHEME_GPTQ, rules.SCHEME_W4A16):
        return "int4" if quant is not None and quant.bits == 4 else ""
    return {rules.SCHEME_FP8: "fp8", rules.SCHEME_NVFP4: "nvfp4"}.get(scheme, "")


def _recovery(repo: str, base: str, upload: dict[str, Any] | None,
              quant: Quantization | None) -> tuple[float | None, str, str]:
    """(recovery, note, kind) of checkpoint ``repo`` of model ``base``: its quantizer's published
    ratio, else its scheme's in the study, else none (the base figure stands, said so)."""
    if upload and upload.get("recovery"):
        return float(upload["recovery"]), str(upload.get("source", "")), RECOVERY_QUANTIZER
    if base.lower() == repo.lower():
        return None, "", ""
    published = (f"{upload['source']}; " if upload and upload.get("source")
                 else f"a quantized upload of {base}: no recovery published for it was read; ")
    key = study_scheme(quant)
    study = quality_table().get("schemes", {}).get(key) if key else None
    if not study:
        return None, published + ("the published study of recoveries per scheme does not cover "
                                  "its scheme, so the base model's figure is used unchanged"), ""
    ratio = float(study["recovery"])
    return ratio, published + (f"the {study['label']} recovery of a published study per scheme "
                               f"({ratio:.4f}, {study['date']}: {study['source']}) is used"), \
        RECOVERY_SCHEME


def base_of(repo: str, base_id: str | None = None) -> str:
    """The model checkpoint ``repo`` is an upload of: the base the table's ``uploads`` names
    for it, else ``base_id`` (its catalog entry), else ``repo`` itself."""
    upload = _lower_keys(quality_table().get("uploads", {})).get(repo.lower())
    return str(upload["base"]) if upload else (base_id or repo)


def figure_for(repo: str, use_case: str, base_id: str | None = None,
               quant: Quantization | None = None) -> QualityFigure:
    """The quality figure of checkpoint ``repo`` for ``use_case``.

    ``base_id`` is the catalog entry the checkpoint belongs to (its base model) when the
    checkpoint is one of that entry's quantized uploads; a stand-alone upload names its base
    in the table's ``uploads``. ``quant`` is the checkpoint's quantization: it picks the
    per-scheme recovery when the quantizer published none.
    """
    table = quality_table()
    key, name = benchmark_for(use_case)
    if not key:
        return unrated(f"the use case {use_case!r} names no benchmark")
    upload = _lower_keys(table.get("uploads", {})).get(repo.lower())
    base = base_of(repo, base_id)
    recovery, note, kind = _recovery(repo, base, upload, quant)
    for row in _lower_keys(table.get("figures", {})).get(base.lower(), ()):
        if row.get("benchmark") == key:
            raw = float(row["score"])
            score = raw * recovery if recovery else raw
            return QualityFigure(score, name, str(row.get("source", "")),
                                 str(row.get("date", "")), raw, recovery, note, kind)
    return unrated(f"no published {name} figure for {base} was found")
