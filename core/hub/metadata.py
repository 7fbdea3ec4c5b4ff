"""Models by Hugging Face repo id: the local HF cache (offline) and, when asked, the Hub.

Offline: the snapshot of ``repo_id`` in the cache (:func:`kvpilot.core.hub.cache.hub_cache_dir`)
is found through ``huggingface_hub`` and read like any model directory
(:func:`kvpilot.core.models.local.load_local_model`).

Online (never needed by tests): ``config.json`` (and, for a vision-language checkpoint, its
``preprocessor_config.json``: the largest image) through ``hf_hub_download`` and the weight bytes
from the Hub's safetensors metadata (``HfApi.get_safetensors_metadata``, which reads only the
headers), cached as JSON in the user cache directory so that the next lookup works offline.
The MTP tensors vLLM loads only with speculative decoding (:mod:`kvpilot.core.models.mtp_weights`)
are taken out of that figure, by name and byte range from the same headers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_HUB, ModelSpec
from kvpilot.core.base.paths import atomic_write_text
from kvpilot.core.hub.cache import cached_snapshot
from kvpilot.core.models.local import (
    CONFIG_FILE,
    PREPROCESSOR_CONFIG_FILE,
    load_local_model,
    spec_from_config,
)
from kvpilot.core.models.mtp_weights import mtp_bytes_from_headers, mtp_rule
from kvpilot.core.models.vision import VISION_ARCHITECTURES
from kvpilot.core.models.weights import DTYPE_BITS


def load_cached_model(
    repo_id: str, *, revision: str | None = None, cache_dir: Path | None = None
) -> ModelSpec | None:
    """Spec of ``repo_id`` from the HF cache, or None when the cache has no config.json for it.

    Raises:
        ModelSpecError: the cached files are malformed (see :func:`load_local_model`).
    """
    snapshot = cached_snapshot(repo_id, revision=revision, cache_dir=cache_dir)
    if snapshot is None:
        return None
    spec = load_local_model(snapshot, model_id=repo_id)
    return replace(spec, source=f"hub-cache:{repo_id}@{snapshot.name}")


def _user_cache_file(repo_id: str, revision: str | None) -> Path:
    from kvpilot.core.base.paths import cache_dir

    safe = repo_id.replace("/", "--") + (f"@{revision}" if revision else "")
    return cache_dir() / "hub-metadata" / f"{safe}.json"


def fetch_hub_model(
    repo_id: str, *, revision: str | None = None, token: str | bool | None = None
) -> ModelSpec:
    """Spec of ``repo_id`` from the Hub (config.json + safetensors metadata), cached on disk.

    Raises:
        ModelSpecError: the repo is unknown, gated or unreachable, or its files are malformed.
    """
    cache_file = _user_cache_file(repo_id, revision)
    record: dict[str, Any] | None = None
    if cache_file.is_file():
        try:
            record = json.loads(cache_file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):  # a damaged cache entry is fetched again
            record = None
    if record is None:
        record = _download_record(repo_id, revision, token)
        atomic_write_text(cache_file, json.dumps(record))
    pre = record.get("preprocessor")
    spec = spec_from_config(
        record["config"], model_id=repo_id, source=f"hub:{repo_id}@{record.get('sha', '')}",
        preprocessor=pre if isinstance(pre, dict) else None,
    )
    mtp = record.get("mtp_bytes")
    shared = record.get("mtp_shared_bytes")
    return replace(spec, weights_bytes=record["weights_bytes"], weights_source=SOURCE_HUB,
                   mtp_weights_bytes=mtp if isinstance(mtp, int) else 0,
                   mtp_shared_copy_bytes=shared if isinstance(shared, int) else 0)


def _download_record(
    repo_id: str, revision: str | None, token: str | bool | None
) -> dict[str, Any]:
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        path = hf_hub_download(repo_id, CONFIG_FILE, revision=revision, token=token)
        meta = HfApi().get_safetensors_metadata(repo_id, revision=revision, token=token)
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise ModelSpecError(
            f"cannot read {repo_id} from the Hugging Face Hub ({err.__class__.__name__}: {err}); "
            "check the repo id, your network and, for gated models, your HF token",
            path=repo_id,
        ) from err
    config = json.loads(Path(str(path)).read_text(encoding="utf-8"))
    preprocessor = None
    archs = config.get("architectures") if isinstance(config, dict) else None
    if isinstance(archs, list) and archs and archs[0] in VISION_ARCHITECTURES:
        try:
            pre_path = hf_hub_download(repo_id, PREPROCESSOR_CONFIG_FILE, revision=revision,
                                       token=token)
            preprocessor = json.loads(Path(str(pre_path)).read_text(encoding="utf-8"))
        except (HfHubHTTPError, OSError, ValueError):
            preprocessor = None  # the processor's defaults apply, as they would in vLLM
    total_bits = 0
    for dtype, count in meta.parameter_count.items():
        if dtype not in DTYPE_BITS:
            raise ModelSpecError(f"unknown safetensors dtype {dtype!r} on the Hub", path=repo_id)
        total_bits += count * DTYPE_BITS[dtype]
    mtp = _hub_mtp_bytes(config, meta)
    return {"config": config, "weights_bytes": total_bits // 8 - mtp, "mtp_bytes": mtp,
            "mtp_shared_bytes": _hub_mtp_bytes(config, meta, shared_copies_only=True),
            "sha": revision or "", "preprocessor": preprocessor}


def _hub_mtp_bytes(config: object, meta: object, *, shared_copies_only: bool = False) -> int:
    """Bytes of the MTP tensors in the Hub's per-file safetensors headers (0: none); with
    ``shared_copies_only`` those of their embedding and output-head copies.

    ``meta`` is huggingface_hub's ``SafetensorsRepoMetadata`` (``files_metadata`` -> file ->
    ``tensors`` -> name -> ``TensorInfo.data_offsets``).
    """
    rule = mtp_rule(config) if isinstance(config, dict) else None
    files = getattr(meta, "files_metadata", None)
    if rule is None or not isinstance(files, dict):
        return 0
    headers: list[dict[str, dict[str, list[int]]]] = []
    for file_meta in files.values():
        tensors = getattr(file_meta, "tensors", None)
        if isinstance(tensors, dict):
            headers.append({
                name: {"data_offsets": list(getattr(info, "data_offsets", ()) or ())}
                for name, info in tensors.items()
            })
    return mtp_bytes_from_headers(rule, headers, shared_copies_only=shared_copies_only)
