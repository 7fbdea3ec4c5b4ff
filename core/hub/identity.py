"""One name for one model, however the user referred to it.

A model reaches kvpilot as a catalog id, a Hugging Face repo id, a snapshot folder inside the
Hugging Face cache (``.../models--Qwen--Qwen3-8B/snapshots/<revision>``, which is what vLLM is
launched with after a download) or a folder of the user's own. Measurements and calibration
need the same key for the first three: the repo id. A folder outside the cache is known by its
absolute path.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvpilot.core.base.model_spec import ModelSpec

#: ``models--{org}--{name}/snapshots/{revision}`` (huggingface_hub's cache layout; ``--``
#: separates the parts, a ``/`` of the repo id becomes ``--``)
_SNAPSHOT = re.compile(r"(?:^|/)models--(?P<repo>[^/]+)/snapshots/[^/]+$")
#: ``ModelSpec.source`` prefixes that name a repo id
_REPO_SOURCES = ("hub-cache:", "hub:", "catalog:")


def model_identity(ref: str) -> str:
    """The identity of a model reference (see the module docstring).

    ``ref`` may be a repo or catalog id (returned as it is), a snapshot folder of the Hugging
    Face cache (its repo id) or any other folder (its absolute path). Nothing is read from disk
    except to resolve a folder's path.
    """
    text = ref.strip()
    if not text:
        return text
    normalised = text.replace("\\", "/")
    m = _SNAPSHOT.search(normalised.rstrip("/"))
    if m is not None:
        return m.group("repo").replace("--", "/", 1)
    looks_like_path = text.startswith(("/", ".", "~")) or normalised.count("/") > 1
    if looks_like_path or Path(text).expanduser().is_dir():
        return str(Path(text).expanduser().resolve())
    return text


def spec_identity(spec: ModelSpec) -> str:
    """The identity of a loaded :class:`ModelSpec` (its repo id when it came from the Hub
    cache, the Hub or the catalog; else that of its ``model_id``)."""
    for prefix in _REPO_SOURCES:
        if spec.source.startswith(prefix):
            repo = spec.source[len(prefix):].split("@", 1)[0]
            if repo:
                return repo
    return model_identity(spec.model_id)


def launch_reference(spec: ModelSpec) -> str:
    """What to hand ``vllm serve`` for a loaded spec: the folder it was read from (a Hugging
    Face cache snapshot included), else its repo id (vLLM or kvpilot's downloader fetches it).
    """
    if spec.source and not spec.source.startswith(_REPO_SOURCES) and Path(spec.source).is_dir():
        return spec.source
    if spec.source.startswith("hub-cache:"):
        from kvpilot.core.hub.cache import cached_snapshot

        repo, _, revision = spec.source[len("hub-cache:"):].partition("@")
        snapshot = cached_snapshot(repo, revision=revision or None)
        if snapshot is None:
            snapshot = cached_snapshot(repo)
        if snapshot is not None:
            return str(snapshot)
    return spec_identity(spec)
