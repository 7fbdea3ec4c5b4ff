"""One entry point from what the user typed to a :class:`ModelSpec`.

Order: an existing local directory (or its config.json); then the Hugging Face cache, when the
cached snapshot has weight files or an index; then the bundled catalog; then, only when online,
the Hub. A cached snapshot without weights still wins over nothing.
"""

from __future__ import annotations

from pathlib import Path

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_ESTIMATE, ModelSpec
from kvpilot.core.hub.cache import hub_cache_dir, is_repo_id
from kvpilot.core.hub.metadata import fetch_hub_model, load_cached_model
from kvpilot.core.models import catalog
from kvpilot.core.models.local import CONFIG_FILE, load_local_model


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~", ".\\")) or ref.count("/") > 1 or "\\" in ref


def load_model_spec(ref: str, *, offline: bool = True) -> ModelSpec:
    """Spec of a local directory, a catalog id or a Hugging Face repo id.

    Raises:
        ModelSpecError: ``ref`` is empty, names a missing path, or is found nowhere; or the files
            found are malformed. The message says where kvpilot looked and what to do.
    """
    ref = ref.strip()
    if not ref:
        raise ModelSpecError("no model given; name a model directory, repo id or catalog id")
    if "\x00" in ref:
        raise ModelSpecError("a model path or id cannot contain a NUL character", path=ref[:200])
    try:
        path = Path(ref).expanduser()
    except RuntimeError as exc:  # "~user/…" of a user this system does not know
        raise ModelSpecError(
            f"cannot expand the home folder in {ref[:200]!r} ({exc}); give the full path",
            path=ref[:200],
        ) from exc
    try:
        if path.is_file() and path.name == CONFIG_FILE:
            path = path.parent
        is_dir = path.is_dir()
    except OSError as exc:  # too long a name, too deep a path
        raise ModelSpecError(
            f"cannot look at this path ({exc.strerror or exc}); give a model directory, repo id "
            "or catalog id",
            path=ref[:200],
        ) from exc
    if is_dir:
        return load_local_model(path)
    if path.exists():
        raise ModelSpecError(
            "this is a file, not a model directory; give the directory holding config.json",
            path=str(path),
        )
    if _looks_like_path(ref) or not is_repo_id(ref):
        raise ModelSpecError(
            "no such model directory, and not a repo id of the form org/name", path=ref
        )

    cached = load_cached_model(ref)
    if cached is not None and cached.weights_source != SOURCE_ESTIMATE:
        return cached
    if catalog.find(ref) is not None:
        return catalog.get(ref)
    if cached is not None:
        return cached
    if not offline:
        return fetch_hub_model(ref)
    raise ModelSpecError(
        f"'{ref}' is not in the Hugging Face cache ({hub_cache_dir()}) nor in kvpilot's catalog; "
        f"download it first (`hf download {ref}`), point to its directory, or allow online lookups",
        path=ref,
    )
