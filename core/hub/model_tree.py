"""A model's checkpoints on the Hub: its own repo and the quantized variants of its model tree.

The Hub links a quantized upload to its base through the tag ``base_model:quantized:<base>``;
:func:`quantized_variants` lists those repos with one ``list_models`` request, and every listed
repo already carries what sizing needs (``expand``): its commit, the Hub's parameter count per
safetensors dtype (read by the Hub from the file headers, so nothing is downloaded) and the
``quantization_config`` of its ``config.json``. Weight bytes are the sum of count x dtype width.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvpilot.core.models.checkpoint_rules import scheme_of
from kvpilot.core.models.weights import DTYPE_BITS

if TYPE_CHECKING:
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import ModelInfo

#: what every listing asks the Hub for, so that no per-repo request is needed to size a repo
LISTING_EXPAND = (
    "safetensors", "config", "sha", "downloads", "trendingScore", "createdAt", "pipeline_tag",
    "gated", "tags",
)
#: quantized variants kept per base (most downloaded first)
VARIANTS_LIMIT = 30


@dataclass(frozen=True)
class HubCheckpoint:
    """One repo holding a model's weights, as the Hub lists it.

    ``weights_bytes`` is None when the Hub has no safetensors parameter count for the repo
    (older ``.bin`` uploads, GGUF); ``scheme`` is a
    :mod:`~kvpilot.core.models.checkpoint_rules` scheme; ``created_at`` ISO date or "".
    """

    repo: str
    sha: str
    scheme: str
    quantization_config: Mapping[str, Any] | None
    weights_bytes: int | None
    downloads: int
    gated: bool
    created_at: str = ""

    def to_json(self) -> dict[str, Any]:
        """The cached form (read back by :func:`checkpoint_from_json`)."""
        return {
            "repo": self.repo, "sha": self.sha, "scheme": self.scheme,
            "quantization_config": dict(self.quantization_config)
            if self.quantization_config else None,
            "weights_bytes": self.weights_bytes, "downloads": self.downloads,
            "gated": self.gated, "created_at": self.created_at,
        }


def checkpoint_from_json(data: Mapping[str, Any]) -> HubCheckpoint:
    """A :class:`HubCheckpoint` from its cached form.

    Raises:
        KeyError, TypeError, ValueError: a damaged record.
    """
    qcfg = data.get("quantization_config")
    wb = data.get("weights_bytes")
    return HubCheckpoint(
        repo=str(data["repo"]), sha=str(data.get("sha") or ""),
        scheme=str(data.get("scheme") or scheme_of(qcfg)),
        quantization_config=dict(qcfg) if isinstance(qcfg, dict) else None,
        weights_bytes=int(wb) if wb is not None else None,
        downloads=int(data.get("downloads") or 0), gated=bool(data.get("gated")),
        created_at=str(data.get("created_at") or ""),
    )


def weights_bytes_of(parameters: Mapping[str, int] | None) -> int | None:
    """Bytes of the weights the Hub counted (``safetensors.parameters``: dtype -> count), or
    None when there is no count or a dtype of unknown width."""
    if not parameters:
        return None
    bits = 0
    for dtype, count in parameters.items():
        width = DTYPE_BITS.get(dtype)
        if width is None:
            return None
        bits += int(count) * width
    return bits // 8


def checkpoint_from_info(info: ModelInfo) -> HubCheckpoint:
    """The :class:`HubCheckpoint` of a listed or looked-up repo."""
    config = info.config if isinstance(info.config, dict) else {}
    qcfg = config.get("quantization_config")
    qcfg = qcfg if isinstance(qcfg, dict) else None
    params = info.safetensors.parameters if info.safetensors is not None else None
    return HubCheckpoint(
        repo=info.id, sha=info.sha or "", scheme=scheme_of(qcfg), quantization_config=qcfg,
        weights_bytes=weights_bytes_of(params), downloads=int(info.downloads or 0),
        gated=bool(info.gated), created_at=info.created_at.date().isoformat()
        if info.created_at else "",
    )


def quantized_variants(
    api: HfApi, base_repo: str, *, limit: int = VARIANTS_LIMIT, token: str | bool | None = None
) -> tuple[HubCheckpoint, ...]:
    """Quantized uploads whose model tree names ``base_repo`` as their base, most downloaded
    first (one ``list_models`` request).

    Raises:
        huggingface_hub.errors.HfHubHTTPError, OSError: the Hub answered with an error or
            cannot be reached (the caller words it).
    """
    infos = api.list_models(
        filter=f"base_model:quantized:{base_repo}", sort="downloads", limit=limit,
        expand=list(LISTING_EXPAND), token=token,  # type: ignore[arg-type]
    )
    return tuple(checkpoint_from_info(i) for i in infos)


def checkpoint_for_json_list(items: Iterable[Mapping[str, Any]]) -> tuple[HubCheckpoint, ...]:
    """Cached checkpoints back (see :func:`checkpoint_from_json`)."""
    return tuple(checkpoint_from_json(i) for i in items)
