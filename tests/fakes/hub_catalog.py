"""Fill the local Hub stand-in with the bundled catalog's models: real configs, real sizes.

Each catalog entry becomes a base repo holding its ``config.json`` fields (the catalog's copy of
the real file, with its sources) and each further checkpoint a quantized repo tagged
``base_model:quantized:<base>`` whose ``quantization_config`` states the catalog's method, bits
and group size. The Hub's safetensors count of every repo is set so that it adds up to the
catalog's weight bytes (16-bit repos as BF16, quantized ones as their bytes). Listing facts the
catalog does not hold (downloads, trending score) are only an order: earlier entries rank higher.
"""

from __future__ import annotations

import json
from typing import Any

from fakes.fake_hub import FakeHub

from kvpilot.core.models.catalog import CatalogCheckpoint, CatalogEntry, catalog_entries

VISION_PIPELINE = "image-text-to-text"


def quantization_config(ckpt: CatalogCheckpoint) -> dict[str, Any] | None:
    """A ``quantization_config`` with the catalog checkpoint's method, bits and group size."""
    if ckpt.method is None:
        return None
    if ckpt.method == "compressed-tensors":
        kind = "float" if ckpt.bits == 8 and "fp8" in ckpt.repo.lower() else "int"
        weights: dict[str, Any] = {"num_bits": ckpt.bits, "type": kind}
        if ckpt.group_size and ckpt.group_size > 0:
            weights.update(strategy="group", group_size=ckpt.group_size)
        group: dict[str, Any] = {"weights": weights, "targets": ["Linear"]}
        if ckpt.bits == 8:
            group["input_activations"] = {"num_bits": 8, "type": kind, "dynamic": True}
        return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}}
    qcfg: dict[str, Any] = {"quant_method": ckpt.method}
    if ckpt.bits is not None:
        qcfg["bits"] = ckpt.bits
    if ckpt.group_size is not None:
        qcfg["group_size"] = ckpt.group_size
    return qcfg


def add_entry(hub: FakeHub, entry: CatalogEntry, rank: int) -> None:
    """One catalog entry and its checkpoints as stand-in repos (``rank`` 0 is the most
    downloaded)."""
    vision = entry.config.get("architectures", [""])[0].endswith("ConditionalGeneration")
    for i, ckpt in enumerate(entry.checkpoints):
        config = dict(entry.config)
        qcfg = quantization_config(ckpt)
        if qcfg is not None:
            config["quantization_config"] = qcfg
        repo = hub.add_repo(ckpt.repo, {"config.json": json.dumps(config).encode()})
        repo.pipeline_tag = VISION_PIPELINE if vision else "text-generation"
        repo.downloads = 1_000_000 - 1000 * rank - i
        repo.trending_score = 500 - rank
        if ckpt.repo != entry.id:
            repo.tags = (f"base_model:quantized:{entry.id}",)
        if not ckpt.weights_bytes:  # a size nobody counted: the Hub lists no count either
            repo.safetensors_parameters = {}
        elif ckpt.repo != entry.id or ckpt.method is not None:
            repo.safetensors_parameters = {"U8": ckpt.weights_bytes}
        else:
            repo.safetensors_parameters = {"BF16": ckpt.weights_bytes // 2}


def add_catalog(hub: FakeHub, entries: tuple[CatalogEntry, ...] | None = None) -> int:
    """Every catalog entry (or ``entries``) into ``hub``; returns the number of base repos."""
    chosen = entries if entries is not None else catalog_entries()
    for rank, entry in enumerate(chosen):
        add_entry(hub, entry, rank)
    return len(chosen)
