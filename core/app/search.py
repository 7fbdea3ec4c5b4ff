"""Find models on the Hugging Face Hub, sized and badged for this GPU: ``kvpilot search`` and
the window's "Find on Hugging Face" dialog both call :func:`search_hub`.

A search is fetched once (:mod:`~kvpilot.core.hub.search_fetch`: two rounds of listing
requests, no file download) and cached; planning is local. Each hit's checkpoints (its own
repo and its quantized variants from the model tree) become :class:`ModelSpec` objects from the
hit's ``config.json`` and the Hub's safetensors counts, and the recommender
(:func:`kvpilot.core.fit.recommend.recommend`) ranks them for the device and goal; the best one
gives the hit's badge:

* ``fits``: a deployment serves the goal (its settings are in the badge);
* ``borderline``: vLLM may or may not start the best plan (the uncertainty band straddles);
* ``does_not_fit``: no checkpoint serves the goal (the reason says by how much);
* ``cannot_plan``: kvpilot cannot read the hit's architecture yet, or has no config.json.

A checkpoint whose weight scheme this GPU cannot run (NVFP4 before Blackwell, FP8 W8A8 before
sm_89: :mod:`~kvpilot.core.models.checkpoint_rules`) is listed as refused with the reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.model_spec import SOURCE_ESTIMATE, SOURCE_HUB, ModelSpec
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import budget
from kvpilot.core.fit.recommend import (
    Candidate,
    CapacityOf,
    Goal,
    Rejection,
    kv_needed_bytes,
    recommend,
)
from kvpilot.core.hub.model_tree import HubCheckpoint
from kvpilot.core.hub.search_fetch import (
    HubSearchError,
    RawHit,
    RawSearch,
    cache_file,
    fetch_search,
    read_cached,
    write_cached,
)
from kvpilot.core.models.checkpoint_rules import SizedCheckpoint, caveat, refusal
from kvpilot.core.models.local import parse_quantization, spec_from_config

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from huggingface_hub import HfApi

    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.hub.catalog_refresh import RefreshResult

BADGE_FITS = "fits"
BADGE_BORDERLINE = "borderline"
BADGE_DOES_NOT_FIT = "does_not_fit"
BADGE_CANNOT_PLAN = "cannot_plan"
BADGE_LABELS = {BADGE_FITS: "fits", BADGE_BORDERLINE: "borderline",
                BADGE_DOES_NOT_FIT: "does not fit", BADGE_CANNOT_PLAN: "cannot plan yet"}
#: a cached search older than this is fetched again when the Hub answers (seconds)
CACHE_MAX_AGE_S = 24 * 3600.0


@dataclass(frozen=True)
class Badge:
    """A hit's verdict for the device and goal: the checkpoint and settings to plan it with
    (None when nothing can be planned) and one line saying why."""

    verdict: str
    reason: str
    checkpoint: str | None = None
    settings: ServingSettings | None = None
    decode_tokens_per_s: float | None = None

    @property
    def label(self) -> str:
        """The words shown for the verdict."""
        return BADGE_LABELS[self.verdict]


@dataclass(frozen=True)
class SearchHit:
    """A search hit: the hit as fetched (``raw``: listing facts, ``config.json``, the Hub's
    checkpoints), its checkpoints sized for this GPU (in ``raw.checkpoints``'s order; none
    when the hit cannot be planned) and its badge."""

    raw: RawHit
    checkpoints: tuple[SizedCheckpoint, ...]
    badge: Badge


@dataclass(frozen=True)
class SearchResult:
    """What :func:`search_hub` found. ``from_cache`` tells whether the Hub was asked;
    ``stale_note`` says so when an old cached answer is shown because the Hub did not answer;
    ``unregistered`` lists (repo, architecture) left out for the runtime; ``runtime_note``
    says which runtime filtered (or that none did)."""

    query: str
    sort: str
    device_name: str
    goal: Goal
    hits: tuple[SearchHit, ...]
    unregistered: tuple[tuple[str, str], ...]
    from_cache: bool
    fetched_at_s: float
    runtime_note: str = ""
    stale_note: str = ""


def search_hub(
    query: str,
    device: DeviceTarget,
    goal: Goal,
    *,
    sort: str = "downloads",
    limit: int = 20,
    registered: frozenset[str] | None = None,
    runtime_note: str = "",
    offline: bool = False,
    refresh: bool = False,
    token: str | bool | None = None,
    api: HfApi | None = None,
    cache_root: Path | None = None,
    capacity_of: CapacityOf = budget.compute_capacity,
    on_progress: Callable[[str], None] | None = None,
) -> SearchResult:
    """Search the Hub for ``query`` (text generation and image-text-to-text models), keep the
    first ``limit`` hits whose architecture is in ``registered`` (None: no filter), size each
    checkpoint from the Hub's metadata and badge it for ``device`` at ``goal``.

    A cached answer younger than :data:`CACHE_MAX_AGE_S` is used without asking the Hub
    (``refresh`` asks anyway); ``offline`` never asks; an older cache is used when the Hub
    does not answer.

    Raises:
        HubSearchError: the Hub cannot be searched and nothing is cached for this search.
    """
    path = cache_file(query, sort, limit, cache_root)
    cached = read_cached(path)
    stale = ""
    raw: RawSearch | None = None
    fresh = cached is not None and time.time() - cached.fetched_at_s < CACHE_MAX_AGE_S
    if cached is not None and (offline or (fresh and not refresh)):
        raw = cached
    elif offline:
        raise HubSearchError(
            f"nothing cached for the search {query!r} and offline mode is on; search once "
            "with a network connection"
        )
    else:
        try:
            raw = fetch_search(query, sort=sort, limit=limit, registered=registered,
                               token=token, api=api, on_progress=on_progress)
            write_cached(path, raw)
        except HubSearchError as err:
            if cached is None:
                raise
            raw = cached
            stale = f"the Hub did not answer ({err.message}); showing the cached results"
    hits, unregistered = _kept(raw, registered, limit)
    badged = badge_hits(hits, device, goal, capacity_of)
    return SearchResult(
        query=query, sort=sort, device_name=device.short_name, goal=goal, hits=badged,
        unregistered=unregistered, from_cache=raw.from_cache, fetched_at_s=raw.fetched_at_s,
        runtime_note=runtime_note, stale_note=stale,
    )


def _kept(
    raw: RawSearch, registered: frozenset[str] | None, limit: int
) -> tuple[tuple[RawHit, ...], tuple[tuple[str, str], ...]]:
    """The hits the runtime serves (a cache fetched for another runtime is filtered again)."""
    if registered is None:
        return raw.hits[:limit], raw.unregistered
    kept = [h for h in raw.hits if h.architecture in registered]
    dropped = [(h.repo, h.architecture) for h in raw.hits if h.architecture not in registered]
    return tuple(kept[:limit]), (*raw.unregistered, *dropped)


def _spec_of(hit: RawHit, ckpt: HubCheckpoint, base: ModelSpec) -> ModelSpec:
    """The spec of one checkpoint: the hit's architecture, the checkpoint's quantization and
    weight bytes (the Hub's count, else the byte model's)."""
    from kvpilot.core.models.local import config_weight_bytes

    quant = parse_quantization(ckpt.quantization_config, ckpt.repo)
    spec = replace(base, model_id=ckpt.repo, quantization=quant,
                   source=f"hub:{ckpt.repo}@{ckpt.sha or hit.sha}")
    if ckpt.weights_bytes is not None:
        return replace(spec, weights_bytes=ckpt.weights_bytes, weights_source=SOURCE_HUB)
    estimate = config_weight_bytes(spec, hit.config or {}, quant)
    return replace(spec, weights_bytes=estimate, weights_source=SOURCE_ESTIMATE,
                   notes=(*spec.notes, "the Hub has no safetensors count: weight bytes from "
                          "the byte model"))


def badge_hits(
    hits: tuple[RawHit, ...], device: DeviceTarget, goal: Goal,
    capacity_of: CapacityOf = budget.compute_capacity,
) -> tuple[SearchHit, ...]:
    """Size every checkpoint of ``hits`` and badge each hit (one recommender call for all)."""
    cc = device.compute_capability
    sized: dict[str, list[SizedCheckpoint]] = {}
    problems: dict[str, str] = {}
    specs: list[ModelSpec] = []
    owners: dict[str, list[str]] = {}
    for hit in hits:
        rows: list[SizedCheckpoint] = []
        sized[hit.repo] = rows
        if hit.config is None:
            problems[hit.repo] = hit.config_error or "no config.json"
            continue
        try:
            base = spec_from_config(dict(hit.config), model_id=hit.repo,
                                    source=f"hub:{hit.repo}@{hit.sha}")
        except KvpilotError as err:
            problems[hit.repo] = f"kvpilot cannot plan {hit.architecture} yet: {err.message}"
            continue
        if not base.architecture_known:  # the generic decoder's figures would be a guess
            problems[hit.repo] = (f"kvpilot has no memory rule for {base.architecture} yet, "
                                  "so it is not badged")
            continue
        for ckpt in hit.checkpoints:
            why = refusal(ckpt.scheme, cc)
            try:
                spec = _spec_of(hit, ckpt, base)
            except KvpilotError as err:
                rows.append(SizedCheckpoint(ckpt.repo, ckpt.scheme, ckpt.weights_bytes, "",
                                            f"unreadable quantization_config: {err.message}"))
                continue
            rows.append(SizedCheckpoint(ckpt.repo, ckpt.scheme, spec.weights_bytes,
                                        spec.weights_source, why or "",
                                        caveat(ckpt.scheme, cc)))
            if why is None:
                if ckpt.repo not in owners:
                    specs.append(spec)
                owners.setdefault(ckpt.repo, []).append(hit.repo)
    goal = replace(goal, model_filter=None)
    result = recommend(device.card(), goal, specs, capacity_of=capacity_of)
    best: dict[str, Candidate] = {}
    for cand in result.candidates:  # ranked best first
        for repo in owners[cand.model_id]:
            best.setdefault(repo, cand)
    rejections: dict[str, list[Rejection]] = {}
    for rej in result.rejected:
        for repo in owners[rej.model_id]:
            rejections.setdefault(repo, []).append(rej)
    out: list[SearchHit] = []
    for hit in hits:
        rows = sized[hit.repo]
        if hit.repo in problems:
            badge = Badge(BADGE_CANNOT_PLAN, problems[hit.repo])
        else:
            badge = _badge(best.get(hit.repo), rejections.get(hit.repo, []), rows,
                           goal.users)
        out.append(SearchHit(raw=hit, checkpoints=tuple(rows), badge=badge))
    return tuple(out)


def _badge(cand: Candidate | None, rejected: list[Rejection],
           rows: list[SizedCheckpoint], users: int) -> Badge:
    """A hit's badge: its best candidate, else a borderline plan that would serve ``users``
    full-context requests if vLLM starts it (the band's upper edge holds their KV), else the
    closest rejection. A plan whose start is uncertain but that could not serve the goal even
    at the upper edge does not fit the goal, whatever the start."""
    if cand is not None:
        return Badge(BADGE_FITS, f"{cand.model_id}: {cand.reason}", cand.model_id,
                     cand.inputs.settings, cand.decode_tokens_per_s)
    for rej in rejected:
        if (rej.borderline is not None
                and rej.borderline[1].available_kv_band_bytes[1]
                >= kv_needed_bytes(rej.borderline[1], users)):
            inputs, _cap = rej.borderline
            return Badge(BADGE_BORDERLINE, f"{rej.model_id}: {rej.reason}", rej.model_id,
                         inputs.settings)
    if rejected:
        closest = min(rejected, key=lambda r: r.shortfall_bytes if r.shortfall_bytes is not
                      None else 1 << 62)
        return Badge(BADGE_DOES_NOT_FIT, f"{closest.model_id}: {closest.reason}")
    refused = [r for r in rows if r.refused]
    if refused:
        return Badge(BADGE_DOES_NOT_FIT, f"{refused[0].repo}: {refused[0].refused}")
    return Badge(BADGE_DOES_NOT_FIT, "no checkpoint with safetensors weights")


def hit_to_json(hit: SearchHit) -> dict[str, Any]:
    """The JSON form of one hit (``kvpilot search --json``)."""
    r, b = hit.raw, hit.badge
    return {
        "repo": r.repo, "sha": r.sha, "pipeline_tag": r.pipeline_tag,
        "architecture": r.architecture, "downloads": r.downloads,
        "trending_score": r.trending_score, "created_at": r.created_at,
        "gated": r.gated,
        "badge": {
            "verdict": b.verdict, "reason": b.reason, "checkpoint": b.checkpoint,
            "max_model_len": b.settings.max_model_len if b.settings else None,
            "max_num_seqs": b.settings.max_num_seqs if b.settings else None,
            "kv_cache_dtype": b.settings.kv_cache_dtype if b.settings else None,
            "gpu_memory_utilization": b.settings.gpu_memory_utilization
            if b.settings else None,
            "decode_tokens_per_s": round(b.decode_tokens_per_s, 1)
            if b.decode_tokens_per_s else None,
        },
        "checkpoints": [
            {"repo": c.repo, "scheme": c.scheme, "weights_bytes": c.weights_bytes,
             "weights_source": c.weights_source, "refused": c.refused or None,
             "note": c.note or None}
            for c in hit.checkpoints
        ],
    }


def size_label(weights_bytes: int | None) -> str:
    """``15.3 GiB`` (or ``?``)."""
    return f"{weights_bytes / GiB:.1f} GiB" if weights_bytes else "?"


def runtime_filter() -> tuple[frozenset[str] | None, str]:
    """The architectures the installed vLLM registers (asked once, then cached) and a line
    saying which runtime that is; (None, why) when no runtime can say, so nothing is left out.
    """
    from kvpilot.core.base.errors import RuntimeNotFoundError
    from kvpilot.core.vllm.architectures import registered_architectures

    try:
        found = registered_architectures()
    except RuntimeNotFoundError as err:
        log.info("no architecture filter: %s", err.message)
        return None, "not filtered by architecture (no usable vLLM runtime to ask)"
    return found.architectures, (
        f"kept to the {len(found.architectures)} architectures vLLM {found.version} registers"
    )


def refresh_catalog_here(
    limit: int = 20, on_progress: Callable[[str], None] | None = None
) -> RefreshResult:
    """Rebuild the user's catalog from the Hub (``limit`` repos per listing), kept to the
    architectures the installed vLLM registers (:func:`runtime_filter`; every one when no vLLM
    can say); ``kvpilot catalog refresh`` and the window's search dialog call it.

    Never raises for an unreachable Hub: the result says which catalog stays in use, and its date.
    """
    from kvpilot.core.hub.catalog_refresh import refresh_catalog

    registered, _line = runtime_filter()
    return refresh_catalog(limit=limit, registered=registered, on_progress=on_progress)
