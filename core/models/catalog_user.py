"""The user's refreshed catalog (``<data dir>/catalog_user.json``), layered over the shipped one.

``kvpilot catalog refresh`` (:mod:`kvpilot.core.hub.catalog_refresh`) writes it; this module
only reads it: its entries replace shipped entries of the same id and the others are appended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvpilot.core.base.paths import data_dir

USER_CATALOG_FILE = "catalog_user.json"


def user_catalog_path() -> Path:
    """``<data dir>/catalog_user.json`` (may not exist)."""
    return data_dir() / USER_CATALOG_FILE


def read_user_catalog(path: Path | None = None) -> dict[str, Any] | None:
    """The refreshed catalog (``{"refreshed_at", "endpoint", "entries"}``), or None when there
    is none or it cannot be read (the shipped catalog is used alone then)."""
    try:
        data = json.loads((path or user_catalog_path()).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
        return None
    return data


def layered(shipped: list[dict[str, Any]], user: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``shipped`` entries with ``user`` ones replacing those of the same id, new ones after."""
    out = list(shipped)
    index = {str(e["id"]).lower(): i for i, e in enumerate(out)}
    for entry in user:
        key = str(entry.get("id", "")).lower()
        if key in index:
            out[index[key]] = entry
        else:
            index[key] = len(out)
            out.append(entry)
    return out
