"""The draft model a ``--speculative-config`` names, read the way kvpilot reads any model.

EAGLE heads and draft models have checkpoints of their own; the planner needs their widths
(for their KV) and their size (for their weights). They are read offline, from a folder, the
Hugging Face cache or the catalog; a draft that cannot be read here gives None, and the plan
says its bytes are missing.
"""

from __future__ import annotations

import json
from functools import lru_cache

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.model_spec import ModelSpec


def draft_reference(speculative_config: str | None) -> str | None:
    """The ``model`` a ``--speculative-config`` JSON names (None: none, ngram, or not JSON)."""
    if not speculative_config:
        return None
    try:
        data = json.loads(speculative_config)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    model = data.get("model")
    if not isinstance(model, str) or model.strip().lower() in ("", "ngram", "[ngram]"):
        return None
    method = data.get("method")
    if isinstance(method, str) and method in ("ngram", "ngram_gpu", "suffix"):
        return None
    return model.strip()


@lru_cache(maxsize=16)
def _load(ref: str) -> ModelSpec | None:
    from kvpilot.core.hub.resolve import load_model_spec

    try:
        return load_model_spec(ref, offline=True)
    except KvpilotError:
        return None


def draft_spec(speculative_config: str | None) -> ModelSpec | None:
    """The spec of the draft model ``speculative_config`` names, or None (none named, or it
    cannot be read offline). Never raises for a draft that cannot be read."""
    ref = draft_reference(speculative_config)
    return _load(ref) if ref else None
