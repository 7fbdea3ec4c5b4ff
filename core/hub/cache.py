"""The local Hugging Face cache: its folder, repo ids, and the snapshots it holds.

The folder is worked out by :func:`hub_cache_dir` alone, at call time (``huggingface_hub`` fixes
its own ``constants.HF_HUB_CACHE`` when it is imported, so a variable set later would be
missed). Nothing here talks to the network.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from kvpilot.core.models.local import CONFIG_FILE

#: ``org/name`` as the Hub accepts it
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")

#: a cached snapshot is a model when it holds one of these (Mistral's own format: params.json)
_SNAPSHOT_CONFIGS = (CONFIG_FILE, "params.json")


def is_repo_id(ref: str) -> bool:
    """Whether ``ref`` has the shape of a Hugging Face model repo id (``org/name``)."""
    return bool(REPO_ID_RE.match(ref)) and ".." not in ref


def hub_cache_dir(
    cache_dir: str | os.PathLike[str] | None = None, *, hf_home: str | None = None
) -> Path:
    """The Hugging Face hub cache folder, read now.

    ``cache_dir`` when given; else ``<hf_home>/hub`` when ``hf_home`` (a profile's ``HF_HOME``)
    is given; else ``HF_HUB_CACHE``; else ``HF_HOME/hub``; else huggingface_hub's default,
    ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``. The folder need not
    exist.
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    if hf_home:
        return Path(hf_home).expanduser() / "hub"
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def repo_folder(repo_id: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """``<cache>/models--org--name``, the folder huggingface_hub keeps a model repo in."""
    from huggingface_hub import constants

    return hub_cache_dir(cache_dir) / constants.REPO_ID_SEPARATOR.join(
        ["models", *repo_id.split("/")]
    )


def cached_snapshot(
    repo_id: str, *, revision: str | None = None, cache_dir: Path | None = None
) -> Path | None:
    """The snapshot folder of ``repo_id`` holding a cached config.json, or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(
        repo_id, CONFIG_FILE, cache_dir=str(hub_cache_dir(cache_dir)), revision=revision
    )
    if isinstance(found, str):
        return Path(found).parent
    return None


def complete_snapshot(
    repo_id: str, revision: str = "main", cache_dir: str | os.PathLike[str] | None = None
) -> Path | None:
    """The cached snapshot folder of ``repo_id`` at ``revision`` if it is complete, else None.

    Complete means: ``config.json`` (or Mistral ``params.json``) and the weights, i.e. every
    file named by a weight index, or at least one safetensors/bin file when there is no index.
    """
    repo_dir = repo_folder(repo_id, cache_dir)
    sha = revision
    ref = repo_dir / "refs" / revision
    if ref.is_file():
        sha = ref.read_text().strip()
    snap = repo_dir / "snapshots" / sha
    if not snap.is_dir():
        return None
    names = {p.name for p in snap.iterdir() if p.exists()}  # exists(): no dangling symlinks
    if not (set(_SNAPSHOT_CONFIGS) & names):
        return None
    for index in sorted(
        n for n in names if n.endswith((".safetensors.index.json", ".bin.index.json"))
    ):
        try:
            weight_map = json.loads((snap / index).read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return snap if set(weight_map.values()) <= names else None
    if any(n.endswith((".safetensors", ".bin")) for n in names):
        return snap
    return None


def cached_repo_ids(cache_dir: Path | None = None) -> tuple[str, ...]:
    """Model repo ids present in the HF cache (for listing and suggestions)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir(hub_cache_dir(cache_dir))
    except CacheNotFound:
        return ()
    return tuple(sorted(r.repo_id for r in info.repos if r.repo_type == "model"))
