"""The bundled catalog (``resources/catalog.json``): curated models and their real checkpoints.

Each entry holds the model's ``config.json`` fields (as Hugging Face spells them), its sources,
whether the facts were verified, a license/gated hint, and its checkpoints: the 16-bit base
(repo id == entry id) plus published AWQ/GPTQ/FP8/... repos, each with its weight bytes and
where they came from (``catalog``: exact or confirmed by a file listing; ``estimate``: computed
by :mod:`.bytemodel`).

Lookups by entry id or checkpoint repo id are case-insensitive. The parsed catalog and every
checkpoint's :class:`ModelSpec` are built once and cached.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_CATALOG, SOURCE_ESTIMATE, ModelSpec, Quantization
from kvpilot.core.models.local import spec_from_config

CATALOG_RESOURCE = "catalog.json"


@dataclass(frozen=True)
class CatalogCheckpoint:
    """One downloadable checkpoint of a catalog model.

    ``method`` is vLLM's quantization name (None for a 16-bit checkpoint); ``weights_bytes`` the
    bytes of all weight tensors; ``weights_source`` ``catalog`` or ``estimate``; ``verified``
    whether config and size are backed by what was seen of the repo (``note`` says what).
    """

    repo: str
    method: str | None
    bits: int | None
    group_size: int | None
    weights_bytes: int
    weights_source: str
    verified: bool
    sources: tuple[str, ...]
    note: str = ""
    torch_dtype: str | None = None



@dataclass(frozen=True)
class CatalogEntry:
    """A model of the catalog with its checkpoints.

    ``params_total`` / ``params_active`` count parameters (active = per token for MoE; vision
    encoders included where the checkpoint holds one); ``context_length`` is the max_model_len vLLM
    derives from the config; ``quality_tier`` 1..5 is a coarse size-based quality hint.
    """

    id: str
    family: str
    params_total: int
    params_active: int
    quality_tier: int
    license: str
    gated: bool
    context_length: int
    verified: bool
    verification: str
    sources: tuple[str, ...]
    notes: tuple[str, ...]
    checkpoints: tuple[CatalogCheckpoint, ...]
    config: dict[str, Any]
    #: first public release (ISO date, ``YYYY-MM`` or ``YYYY-MM-DD``; "" when not recorded)
    release_date: str = ""
    #: where the release date was read, or the sentence saying no source gave one
    release_date_source: str = ""

    @property
    def base_checkpoint(self) -> CatalogCheckpoint:
        """The checkpoint published under the entry's own id."""
        return next(c for c in self.checkpoints if c.repo == self.id)


def _as_checkpoint(raw: dict[str, Any], entry_id: str) -> CatalogCheckpoint:
    try:
        return CatalogCheckpoint(
            repo=str(raw["repo"]),
            method=raw.get("method"),
            bits=raw.get("bits"),
            group_size=raw.get("group_size"),
            weights_bytes=int(raw["weights_bytes"]),
            weights_source=str(raw["weights_source"]),
            verified=bool(raw["verified"]),
            sources=tuple(raw["sources"]),
            note=str(raw.get("note", "")),
            torch_dtype=raw.get("torch_dtype"),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ModelSpecError(
            f"catalog checkpoint of {entry_id} is malformed ({err!r})", path=CATALOG_RESOURCE
        ) from err


def _as_entry(raw: dict[str, Any]) -> CatalogEntry:
    try:
        entry_id = str(raw["id"])
        return CatalogEntry(
            id=entry_id,
            family=str(raw["family"]),
            params_total=int(raw["params_total"]),
            params_active=int(raw["params_active"]),
            quality_tier=int(raw["quality_tier"]),
            license=str(raw["license"]),
            gated=bool(raw["gated"]),
            context_length=int(raw["context_length"]),
            verified=bool(raw["verified"]),
            verification=str(raw["verification"]),
            sources=tuple(raw["sources"]),
            notes=tuple(raw.get("notes", ())),
            checkpoints=tuple(_as_checkpoint(c, entry_id) for c in raw["checkpoints"]),
            config=dict(raw["config"]),
            release_date=str(raw.get("release_date") or ""),
            release_date_source=str(raw.get("release_date_source") or ""),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise ModelSpecError(
            f"catalog entry is malformed ({err!r})", path=CATALOG_RESOURCE
        ) from err


@cache
def _shipped_data() -> dict[str, Any]:
    try:
        text = resources.files("kvpilot.resources").joinpath(CATALOG_RESOURCE).read_text("utf-8")
        data = json.loads(text)
    except (OSError, json.JSONDecodeError) as err:
        raise ModelSpecError(
            f"bundled catalog cannot be read ({err}); reinstall kvpilot", path=CATALOG_RESOURCE
        ) from err
    return dict(data)


def shipped_entries() -> tuple[CatalogEntry, ...]:
    """The entries kvpilot ships, without the user's refreshed ones.

    Raises:
        ModelSpecError: the bundled catalog is missing or malformed (a packaging error).
    """
    return tuple(_as_entry(e) for e in _shipped_data()["entries"])


def shipped_catalog_date() -> str:
    """The date the shipped catalog was built (ISO)."""
    return str(_shipped_data().get("catalog_date", ""))


def catalog_date() -> str:
    """The date of the catalog in use: the user's refresh when there is one, else the shipped
    catalog's."""
    from kvpilot.core.models.catalog_user import read_user_catalog

    user = read_user_catalog()
    return str(user.get("refreshed_at", "")) if user else shipped_catalog_date()


@cache
def catalog_entries() -> tuple[CatalogEntry, ...]:
    """All catalog entries, in catalog order: the shipped ones with the user's refreshed
    catalog (:mod:`kvpilot.core.models.catalog_user`) layered over them.

    Raises:
        ModelSpecError: the bundled catalog is missing or malformed (a packaging error).
    """
    from kvpilot.core.models.catalog_user import layered, read_user_catalog

    raw = list(_shipped_data()["entries"])
    user = read_user_catalog()
    if user is not None:
        raw = layered(raw, [e for e in user["entries"] if isinstance(e, dict)])
    return tuple(_as_entry(e) for e in raw)


def forget_loaded_catalog() -> None:
    """Drop what was read of the catalog, so that the next look-up reads it again (after a
    refresh)."""
    for fn in (catalog_entries, _index, _split, all_checkpoint_specs):
        fn.cache_clear()


def checkpoint_spec(entry: CatalogEntry, checkpoint: CatalogCheckpoint) -> ModelSpec:
    """The :class:`ModelSpec` of one checkpoint of ``entry``."""
    base = spec_from_config(
        entry.config, model_id=checkpoint.repo, source=f"catalog:{checkpoint.repo}"
    )
    quant = (
        Quantization(checkpoint.method, checkpoint.bits, checkpoint.group_size)
        if checkpoint.method
        else None
    )
    notes = list(base.notes) + list(entry.notes)
    if not entry.verified:
        notes.append(f"architecture not fully verified: {entry.verification}")
    if not checkpoint.verified and checkpoint.note:
        notes.append(f"checkpoint unverified: {checkpoint.note}")
    source = SOURCE_CATALOG if checkpoint.weights_source == "catalog" else SOURCE_ESTIMATE
    return replace(
        base,
        quantization=quant,
        weights_bytes=checkpoint.weights_bytes,
        weights_source=source,
        torch_dtype=checkpoint.torch_dtype or base.torch_dtype,
        notes=tuple(notes),
    )


@cache
def _index() -> dict[str, tuple[CatalogEntry, CatalogCheckpoint]]:
    index: dict[str, tuple[CatalogEntry, CatalogCheckpoint]] = {}
    for entry in catalog_entries():
        for ckpt in entry.checkpoints:
            index[ckpt.repo.lower()] = (entry, ckpt)
    return index


def find(ref: str) -> tuple[CatalogEntry, CatalogCheckpoint] | None:
    """The entry and checkpoint named ``ref`` (entry id or checkpoint repo), or None."""
    return _index().get(ref.strip().lower())


@cache
def _split() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    """(specs of the checkpoints kvpilot can plan, reason for each it cannot yet) by repo key.

    A checkpoint cannot be planned when its architecture has no memory rule in kvpilot yet
    (``architecture_known`` False) or its config lacks a field the planner needs: the catalog
    may list it before the planner supports it, and the recommender then names it rejected
    instead of ranking a guess.
    """
    specs: dict[str, ModelSpec] = {}
    reasons: dict[str, str] = {}
    for key, (entry, ckpt) in _index().items():
        try:
            spec = checkpoint_spec(entry, ckpt)
        except ModelSpecError as err:
            reasons[key] = f"kvpilot cannot plan {ckpt.repo} yet: {err.message}"
            continue
        if not spec.architecture_known:
            reasons[key] = (f"kvpilot has no memory rule for {spec.architecture} yet, so "
                            f"{ckpt.repo} is not ranked")
            continue
        specs[key] = spec
    return specs, reasons


def _spec_cache() -> dict[str, ModelSpec]:
    return _split()[0]


def unplannable() -> tuple[tuple[str, str], ...]:
    """(checkpoint repo, why) for each catalog checkpoint the planner cannot plan yet, in
    catalog order."""
    reasons = _split()[1]
    return tuple(
        (c.repo, reasons[c.repo.lower()])
        for e in catalog_entries() for c in e.checkpoints if c.repo.lower() in reasons
    )


def get(ref: str) -> ModelSpec:
    """Spec of a catalog checkpoint; an entry id gives its 16-bit (or native) base checkpoint.

    Raises:
        ModelSpecError: ``ref`` is in the catalog under no id; the message lists close matches.
    """
    spec = _spec_cache().get(ref.strip().lower())
    if spec is not None:
        return spec
    why = _split()[1].get(ref.strip().lower())
    if why is not None:
        raise ModelSpecError(why, field="model")
    close = difflib.get_close_matches(
        ref, [c.repo for e in catalog_entries() for c in e.checkpoints], n=3
    )
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ModelSpecError(
        f"'{ref}' is not in the catalog{hint} (run `kvpilot recommend` to see catalog models, or "
        "give a model directory or a Hugging Face repo id)",
        field="model",
    )


@cache
def all_checkpoint_specs() -> tuple[ModelSpec, ...]:
    """Specs of every checkpoint the planner can plan, in catalog order (cached after the first
    call); :func:`unplannable` lists the others."""
    specs = _spec_cache()
    return tuple(
        specs[c.repo.lower()] for e in catalog_entries() for c in e.checkpoints
        if c.repo.lower() in specs
    )
