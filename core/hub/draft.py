"""The draft model a ``--speculative-config`` names, read the way kvpilot reads any model.

EAGLE heads and draft models have checkpoints of their own; the planner needs their widths
(for their KV) and their size (for their weights). They are read offline, from a folder, the
Hugging Face cache or the catalog; a draft that cannot be read here gives None, and the plan
says its bytes are missing.
"""

from __future__ import annotations

from functools import lru_cache

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.speculative_config import speculative_settings


def draft_reference(speculative_config: str | None) -> str | None:
    """The draft ``model`` a ``--speculative-config`` names (None: none, a method without a
    network of its own, or text vLLM would refuse); read by
    :func:`kvpilot.core.base.speculative_config.speculative_settings`."""
    settings = speculative_settings(speculative_config)
    return settings.model if settings is not None else None


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
