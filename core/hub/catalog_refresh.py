"""Rebuild the user's catalog from the Hub (``kvpilot catalog refresh`` and the window's button).

The most downloaded and the trending text and image-text models on the Hub (``HF_ENDPOINT`` read
now) whose architecture the installed vLLM registers are built as catalog entries
(:func:`kvpilot.core.hub.catalog_build.entry_from_hub`: config.json at a pinned commit, sizes
from the safetensors metadata, the quantized uploads of the model tree, the release date from
the repo's creation date). Quantized uploads found in the listing are reached through their base.
The result is written with its date to ``<data dir>/catalog_user.json``; the catalog layers it
over the shipped one (:func:`kvpilot.core.models.catalog.catalog_entries`). Offline, nothing is
written and the result names the catalog in use and its date.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvpilot.core.base.paths import atomic_write_text
from kvpilot.core.hub.catalog_build import BuildSource, CatalogBuildError, entry_from_hub
from kvpilot.core.models.catalog_user import read_user_catalog, user_catalog_path

#: the listings asked: (pipeline tag, Hub sort)
LISTINGS = (("text-generation", "downloads"), ("text-generation", "trendingScore"),
            ("image-text-to-text", "downloads"), ("image-text-to-text", "trendingScore"))
QUANTIZED_TAG = "base_model:quantized:"


@dataclass(frozen=True)
class RefreshResult:
    """What a refresh did: ``online`` (the Hub answered), ``added`` (ids of entries the shipped
    catalog lacks), ``built`` (every entry written), ``skipped`` ((id, why) pairs),
    ``catalog_date`` (the date of the catalog now in use) and ``message`` (one line for the
    user)."""

    online: bool
    added: tuple[str, ...]
    built: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    catalog_date: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"online": self.online, "added": list(self.added), "built": list(self.built),
                "skipped": [{"id": i, "why": w} for i, w in self.skipped],
                "catalog_date": self.catalog_date, "message": self.message}


def _family_of(repo_id: str) -> str:
    """A family label from the repo name: its words before the first size (``Qwen3.6``)."""
    name = repo_id.split("/", 1)[-1]
    words = name.replace("_", "-").split("-")
    kept = []
    for word in words:
        if word[:1].isdigit() and any(c in word.lower() for c in "bm"):
            break
        kept.append(word)
    return " ".join(kept) or name


def _listed(endpoint: str, token: str | bool | None, limit: int) -> list[Any]:
    from kvpilot.core.hub.model_tree import LISTING_EXPAND
    from kvpilot.core.hub.search_fetch import _list_models_once

    found: list[Any] = []
    for tag, sort in LISTINGS:
        found += _list_models_once(endpoint, token, {
            "pipeline_tag": tag, "sort": sort, "limit": limit, "expand": list(LISTING_EXPAND)})
    return found


def _candidates(listing: list[Any], registered: frozenset[str] | None) -> list[str]:
    """Base repo ids of the listing, in listing order, once each: a quantized upload stands for
    its base; architectures the runtime does not register are left out."""
    seen: dict[str, None] = {}
    for info in listing:
        base = next((t[len(QUANTIZED_TAG):] for t in (info.tags or ())
                     if isinstance(t, str) and t.startswith(QUANTIZED_TAG)), None)
        config = info.config if isinstance(info.config, dict) else {}
        archs = config.get("architectures") or []
        if registered is not None and archs and str(archs[0]) not in registered:
            continue
        seen.setdefault(base or info.id, None)
    return list(seen)


def refresh_catalog(
    *, limit: int = 20, registered: frozenset[str] | None = None,
    token: str | bool | None = None, path: Path | None = None,
    today: Callable[[], dt.date] = dt.date.today,
    on_progress: Callable[[str], None] | None = None,
) -> RefreshResult:
    """Rebuild the user's catalog from the Hub (module docstring); ``limit`` repos per listing.

    Never raises for an unreachable Hub: the result says the shipped (or last refreshed)
    catalog stays in use, with its date.
    """
    from kvpilot.core.hub.download import _FINALIZE_NETWORK_ERRORS, resolve_endpoint
    from kvpilot.core.hub.search_fetch import HUB_ERRORS
    from kvpilot.core.models.catalog import shipped_catalog_date, shipped_entries

    say = on_progress or (lambda _text: None)
    endpoint = resolve_endpoint()
    target = path or user_catalog_path()
    failed: tuple[type[BaseException], ...] = (
        *HUB_ERRORS, *_FINALIZE_NETWORK_ERRORS, RuntimeError)
    say(f"listing the most downloaded and trending models on {endpoint}")
    try:
        listing = _listed(endpoint, token, limit)
    except failed as err:
        previous = read_user_catalog(target)
        date = str(previous.get("refreshed_at", "")) if previous else shipped_catalog_date()
        which = "the catalog refreshed on" if previous else "the shipped catalog of"
        return RefreshResult(False, (), (), (), date,
                             f"the Hub cannot be reached ({err.__class__.__name__}); "
                             f"{which} {date} stays in use")
    shipped = {e.id.lower() for e in shipped_entries()}
    built: list[dict[str, Any]] = []
    skipped: list[tuple[str, str]] = []
    for repo_id in _candidates(listing, registered):
        say(f"reading {repo_id}")
        try:
            built.append(entry_from_hub(BuildSource(repo_id, _family_of(repo_id)), token=token))
        except CatalogBuildError as err:
            skipped.append((repo_id, err.message))
    date = today().isoformat()
    atomic_write_text(target, json.dumps({"refreshed_at": date, "endpoint": endpoint,
                                          "entries": built}, indent=1) + "\n", mode=0o644)
    from kvpilot.core.models.catalog import forget_loaded_catalog

    forget_loaded_catalog()
    added = tuple(e["id"] for e in built if str(e["id"]).lower() not in shipped)
    return RefreshResult(True, added, tuple(e["id"] for e in built), tuple(skipped), date,
                         f"catalog refreshed on {date} from {endpoint}: {len(built)} models "
                         f"read, {len(added)} new")
