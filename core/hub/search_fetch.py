"""Fetching a Hub search: the listing, each hit's config.json and its quantized variants.

Two rounds of requests, each sent all at once (a thread pool):

1. one ``list_models`` per pipeline tag (``text-generation``, ``image-text-to-text``) with the
   search text, sorted by downloads or trending score, each hit already carrying its commit,
   parameter count per safetensors dtype and the ``architectures`` and ``quantization_config``
   of its config (``expand``);
2. for each hit whose architecture the installed vLLM registers: its ``config.json`` at the
   listed commit (the shapes the planner needs, which the listing does not carry) and, for a
   16-bit hit, its quantized variants (:func:`kvpilot.core.hub.model_tree.quantized_variants`).

No safetensors file is read: the Hub's own count sizes every repo. The result is stored as JSON
in the user cache directory (``hub-search/``) and read back offline.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.paths import atomic_write_text
from kvpilot.core.hub.model_tree import (
    LISTING_EXPAND,
    HubCheckpoint,
    checkpoint_for_json_list,
    checkpoint_from_info,
    quantized_variants,
)
from kvpilot.core.models.checkpoint_rules import SCHEME_16BIT

if TYPE_CHECKING:
    from huggingface_hub import HfApi

#: the Hub's pipeline tags of the models vLLM generates text with
PIPELINE_TAGS = ("text-generation", "image-text-to-text")
#: sort orders: ours -> the Hub's
SORTS: dict[str, Literal["downloads", "trending_score"]] = {
    "downloads": "downloads", "trending": "trending_score",
}
CACHE_SCHEMA = 1
#: the model-tree tag of a quantized upload
QUANTIZED_TAG = "base_model:quantized:"
CACHE_FOLDER = "hub-search"
#: parallel requests in a round
WORKERS = 8


def _hub_errors() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import HfHubHTTPError

    return (HfHubHTTPError, OSError, ValueError)


#: what a failed Hub request raises (besides the transport errors of huggingface_hub's client)
HUB_ERRORS = _hub_errors()


class HubSearchError(KvpilotError):
    """The Hub could not be searched and nothing is cached for this search."""


@dataclass(frozen=True)
class RawHit:
    """One search hit as fetched: listing facts, its full ``config.json`` (None when it could
    not be read: ``config_error`` says why) and its checkpoints (its own repo first)."""

    repo: str
    sha: str
    pipeline_tag: str
    architecture: str
    downloads: int
    trending_score: int
    created_at: str
    gated: bool
    config: Mapping[str, Any] | None
    config_error: str
    checkpoints: tuple[HubCheckpoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "repo": self.repo, "sha": self.sha, "pipeline_tag": self.pipeline_tag,
            "architecture": self.architecture, "downloads": self.downloads,
            "trending_score": self.trending_score, "created_at": self.created_at,
            "gated": self.gated, "config": dict(self.config) if self.config else None,
            "config_error": self.config_error,
            "checkpoints": [c.to_json() for c in self.checkpoints],
        }


@dataclass(frozen=True)
class RawSearch:
    """A fetched search: its hits in rank order, those left out (repo, architecture) because
    the runtime does not register the architecture, and when it was fetched (epoch s)."""

    query: str
    sort: str
    hits: tuple[RawHit, ...]
    unregistered: tuple[tuple[str, str], ...]
    fetched_at_s: float
    from_cache: bool = False


def cache_file(query: str, sort: str, limit: int, root: Path | None = None) -> Path:
    """The cache file of one search (query case and spaces do not matter)."""
    from kvpilot.core.base.paths import cache_dir

    key = json.dumps([" ".join(query.lower().split()), sort, limit])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    return (root or cache_dir()) / CACHE_FOLDER / f"{digest}.json"


def read_cached(path: Path) -> RawSearch | None:
    """The cached search at ``path``, or None when there is none or it is damaged."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("schema") != CACHE_SCHEMA:
            return None
        hits = tuple(_hit_from_json(h) for h in data["hits"])
        unregistered = tuple((str(r), str(a)) for r, a in data.get("unregistered", ()))
        return RawSearch(str(data["query"]), str(data["sort"]), hits, unregistered,
                         float(data["fetched_at_s"]), from_cache=True)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _hit_from_json(h: Mapping[str, Any]) -> RawHit:
    cfg = h.get("config")
    return RawHit(
        repo=str(h["repo"]), sha=str(h.get("sha") or ""),
        pipeline_tag=str(h.get("pipeline_tag") or ""),
        architecture=str(h.get("architecture") or ""), downloads=int(h.get("downloads") or 0),
        trending_score=int(h.get("trending_score") or 0),
        created_at=str(h.get("created_at") or ""), gated=bool(h.get("gated")),
        config=dict(cfg) if isinstance(cfg, dict) else None,
        config_error=str(h.get("config_error") or ""),
        checkpoints=checkpoint_for_json_list(h.get("checkpoints") or ()),
    )


def write_cached(path: Path, raw: RawSearch) -> None:
    """Store ``raw`` (a cache that cannot be written only costs a fetch next time)."""
    data = {
        "schema": CACHE_SCHEMA, "query": raw.query, "sort": raw.sort,
        "fetched_at_s": raw.fetched_at_s, "hits": [h.to_json() for h in raw.hits],
        "unregistered": [list(u) for u in raw.unregistered],
    }
    try:
        atomic_write_text(path, json.dumps(data))
    except OSError:
        return


def _listed_architecture(config: object) -> str:
    archs = config.get("architectures") if isinstance(config, dict) else None
    return str(archs[0]) if isinstance(archs, list) and archs else ""


def _base_of(info: Any) -> str | None:  # noqa: ANN401 - huggingface_hub's ModelInfo
    """The base a quantized upload names in its model tree (``base_model:quantized:<id>``)."""
    for tag in info.tags or ():
        if isinstance(tag, str) and tag.startswith(QUANTIZED_TAG):
            return tag[len(QUANTIZED_TAG) :]
    return None


def _read_config(
    repo: str, sha: str, token: str | bool | None, endpoint: str
) -> Mapping[str, Any]:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(repo, "config.json", revision=sha or None, token=token,
                           endpoint=endpoint)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("config.json does not hold a JSON object")
    return data


#: the Hub's own spelling of a sort order (what ``HfApi.list_models`` sends)
_HUB_SORT = {"downloads": "downloads", "trending_score": "trendingScore"}


def _list_models_once(
    endpoint: str, token: str | bool | None, params: Mapping[str, Any]
) -> list[Any]:
    """One page of ``/api/models`` as ``ModelInfo`` records, asked once.

    What ``HfApi.list_models`` sends, without its retries: huggingface_hub retries a refused
    connection five times over 23 s (measured here), so an offline search would keep the user
    waiting that long before the cached results show. One page is all a search keeps.

    Raises:
        the transport's errors and huggingface_hub's ``HfHubHTTPError`` (in ``HUB_ERRORS``).
    """
    from huggingface_hub import ModelInfo
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    response = get_session().get(
        f"{endpoint}/api/models", params=dict(params),
        headers=build_hf_headers(token=token, library_name="kvpilot"),
    )
    hf_raise_for_status(response)
    return [ModelInfo(**{"siblings": None, **item}) for item in response.json()]


def fetch_search(
    query: str,
    *,
    sort: str = "downloads",
    limit: int = 20,
    registered: frozenset[str] | None = None,
    token: str | bool | None = None,
    api: HfApi | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> RawSearch:
    """Search the Hub for ``query`` and fetch what sizing and planning need (module docstring).

    ``registered`` (None: no filter) keeps hits whose architecture the runtime registers; the
    first ``limit`` of those are kept.

    The Hub is the one ``HF_ENDPOINT`` names now (read at call time). The listing is asked
    once (an unreachable Hub fails at once, for the cached results); the configs and model
    trees after it go through huggingface_hub as usual.

    Raises:
        HubSearchError: the listing failed (network, Hub error); a hit whose config.json fails
            is kept with ``config_error`` set.
    """
    from huggingface_hub import HfApi

    from kvpilot.core.hub.download import _FINALIZE_NETWORK_ERRORS

    # on a refused connection huggingface_hub closes its shared client, and a request another
    # thread of the round has in flight then fails with RuntimeError ("client has been closed")
    failed: tuple[type[BaseException], ...] = (
        *HUB_ERRORS, *_FINALIZE_NETWORK_ERRORS, RuntimeError)
    if sort not in SORTS:
        raise HubSearchError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
    from kvpilot.core.hub.download import resolve_endpoint

    endpoint = api.endpoint if api is not None else resolve_endpoint()
    hub = api or HfApi(endpoint=endpoint, library_name="kvpilot")
    say = on_progress or (lambda _text: None)
    say(f"searching the Hub for {query!r}")

    def listing(tag: str) -> list[Any]:
        return _list_models_once(endpoint, token, {
            "pipeline_tag": tag, "sort": _HUB_SORT[SORTS[sort]], "limit": limit * 2,
            "expand": list(LISTING_EXPAND), **({"search": query} if query else {}),
        })

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        try:
            pages = list(pool.map(listing, PIPELINE_TAGS))
        except failed as err:
            raise HubSearchError(
                f"cannot search the Hugging Face Hub ({err.__class__.__name__}: {err}); check "
                "your network, or search again later to use the cached results"
            ) from err
        merged: dict[str, tuple[str, Any]] = {}
        for tag, infos in zip(PIPELINE_TAGS, pages, strict=True):
            for info in infos:
                merged.setdefault(info.id, (tag, info))
        key = "trending_score" if sort == "trending" else "downloads"
        ordered = sorted(merged.values(), key=lambda ti: -(getattr(ti[1], key) or 0))
        kept: list[tuple[str, Any]] = []
        unregistered: list[tuple[str, str]] = []
        listed = set(merged)
        for tag, info in ordered:
            if _base_of(info) in listed:
                continue  # a quantized upload of a listed base: it comes with the base's tree
            arch = _listed_architecture(info.config)
            if registered is not None and arch not in registered:
                unregistered.append((info.id, arch or "none named"))
                continue
            if len(kept) < limit:
                kept.append((tag, info))
        say(f"{len(kept)} hits; reading their configs and quantized variants")

        def details(item: tuple[str, Any]) -> RawHit:
            tag, info = item
            own = checkpoint_from_info(info)
            config: Mapping[str, Any] | None = None
            error = ""
            variants: tuple[HubCheckpoint, ...] = ()
            try:
                config = _read_config(info.id, own.sha, token, endpoint)
            except failed as err:
                error = f"config.json cannot be read ({err.__class__.__name__}: {err})"
            if own.scheme == SCHEME_16BIT:
                try:
                    variants = quantized_variants(hub, info.id, token=token)
                except failed:
                    variants = ()  # the hit still plans with its own weights
            return RawHit(
                repo=info.id, sha=own.sha, pipeline_tag=tag,
                architecture=_listed_architecture(config) or _listed_architecture(info.config),
                downloads=own.downloads, trending_score=int(info.trending_score or 0),
                created_at=own.created_at, gated=own.gated, config=config, config_error=error,
                checkpoints=(own, *(v for v in variants if v.repo != own.repo)),
            )

        hits = tuple(pool.map(details, kept))
    return RawSearch(query, sort, hits, tuple(unregistered), time.time())
