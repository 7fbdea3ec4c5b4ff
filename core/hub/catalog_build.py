"""Build catalog entries (``resources/catalog.json``) from the Hub, or from public file copies.

An entry is made from one *source line* (:class:`BuildSource`: the base repo id, its family,
release date, an optional pinned revision and how many quantized variants to keep):

* from the Hub (:func:`entry_from_hub`): the base repo's commit (pinned), ``config.json`` at
  that commit, the Hub's safetensors parameter count (the weight bytes: headers only, nothing is
  downloaded) and the quantized variants of its model tree (``base_model:quantized:<id>``,
  :func:`kvpilot.core.hub.model_tree.quantized_variants`), each with its own commit, scheme and
  count;
* from copies (:func:`entry_from_copies`): a folder ``<org>__<name>/`` holding a verbatim
  ``config.json``, ``SOURCE.txt`` (where each copy or figure was found) and, for the weight
  bytes, the first of: ``model.safetensors.index.json`` (its ``metadata.total_size``),
  ``hub_safetensors.json`` (the Hub API's ``safetensors.parameters`` counts, dtype -> count, as
  quoted publicly) or ``file_sizes.json`` (the checkpoint's file sizes in bytes, as quoted
  publicly: the ``.safetensors`` files are summed, their JSON headers included), for machines
  that cannot reach the Hub. A ModelOpt checkpoint whose config.json holds no
  ``quantization_config`` takes its ``hf_quant_config.json`` copy's section, as vLLM does.

A checkpoint whose bytes nobody counted carries the byte model's figure
(:func:`kvpilot.core.models.bytemodel.estimate_weight_bytes`) with ``weights_source``
``estimate`` and a note saying so. Variants are kept one per weight scheme (the most downloaded),
schemes vLLM runs on some card only (:mod:`kvpilot.core.models.checkpoint_rules`); an NVFP4
checkpoint is kept with a note on how it runs off Blackwell (vLLM's Marlin FP4 kernel).
``scripts/build_catalog.py`` is the command-line face.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import KvpilotError, ModelSpecError
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.hub.model_tree import (
    HubCheckpoint,
    checkpoint_from_info,
    quantized_variants,
    weights_bytes_of,
)
from kvpilot.core.models.checkpoint_rules import (
    NVFP4_GROUP_SIZE,
    SCHEME_16BIT,
    SCHEME_NVFP4,
    SCHEME_OTHER,
    caveat,
    refusal,
    scheme_of,
)
from kvpilot.core.models.local import parse_quantization, spec_from_config

if TYPE_CHECKING:
    from huggingface_hub import HfApi

#: weight schemes a catalog checkpoint may have (GGUF, bitsandbytes, unknown methods: left out)
CATALOG_SCHEMES = frozenset({"awq", "gptq", "fp8", "w4a16", "w8a8-int8", "mxfp4", "nvfp4"})
INDEX_FILE = "model.safetensors.index.json"
HUB_SAFETENSORS_FILE = "hub_safetensors.json"
FILE_SIZES_FILE = "file_sizes.json"
SOURCE_FILE = "SOURCE.txt"
#: a ModelOpt checkpoint's quantization, beside config.json
HF_QUANT_FILE = "hf_quant_config.json"
#: the Hub's expand fields for a base repo
INFO_EXPAND = ("sha", "safetensors", "config", "createdAt", "cardData", "gated")


class CatalogBuildError(KvpilotError):
    """A source line cannot be built (the message names the repo and what is missing)."""


@dataclass(frozen=True)
class BuildSource:
    """One model to build: ``id`` (base repo), ``family``, ``release_date`` (ISO, "" to take the
    repo's creation date from the Hub), ``revision`` (None: the newest commit, then pinned),
    ``license``/``gated`` hints ("" / None: from the Hub), ``max_variants`` quantized repos kept,
    ``variants`` exact repos to keep instead of the model tree's choice, and ``notes``."""

    id: str
    family: str
    release_date: str = ""
    revision: str | None = None
    license: str = ""
    gated: bool | None = None
    max_variants: int = 4
    variants: tuple[str, ...] | None = None
    notes: tuple[str, ...] = field(default=())


def load_sources(path: Path) -> tuple[BuildSource, ...]:
    """The source lines of a JSON file (``{"models": [{"id": ..., "family": ...}, ...]}``).

    Raises:
        CatalogBuildError: the file cannot be read or a line lacks ``id`` or ``family``.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        out = []
        for raw in data["models"]:
            variants = raw.get("variants")
            out.append(BuildSource(
                id=str(raw["id"]), family=str(raw["family"]),
                release_date=str(raw.get("release_date") or ""), revision=raw.get("revision"),
                license=str(raw.get("license") or ""), gated=raw.get("gated"),
                max_variants=int(raw.get("max_variants", 4)),
                variants=tuple(variants) if variants is not None else None,
                notes=tuple(raw.get("notes", ())),
            ))
        return tuple(out)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CatalogBuildError(f"cannot read the build sources {path}: {err!r}") from err


def quality_tier(params_total: int, params_active: int) -> int:
    """1..5 from effective parameters (sqrt(total x active) for MoE): <2B, <5B, <10B, <20B."""
    effective = math.sqrt(params_total * params_active) if params_active < params_total \
        else params_total
    for tier, limit in enumerate((2e9, 5e9, 10e9, 20e9), start=1):
        if effective < limit:
            return tier
    return 5


def _params(spec: ModelSpec, config: Mapping[str, Any]) -> tuple[int, int]:
    from kvpilot.core.models.bytemodel import param_breakdown
    from kvpilot.core.models.local import text_config_of

    breakdown = param_breakdown(spec, text_config_of(config))
    frac = 1.0
    if spec.moe is not None and spec.moe.num_experts:
        frac = spec.moe.num_experts_per_tok / spec.moe.num_experts
    return breakdown.total_params, breakdown.active_params(frac)


def _checkpoint(
    base: ModelSpec, config: Mapping[str, Any], repo: str, qcfg: Mapping[str, Any] | None,
    weights_bytes: int | None, sources: Sequence[str], revision: str, how_counted: str,
) -> dict[str, Any]:
    """One checkpoint line of the catalog (``config``: the base model's config.json)."""
    from kvpilot.core.models.local import config_weight_bytes

    quant = parse_quantization(dict(qcfg) if qcfg else None, repo)
    scheme = scheme_of(qcfg)
    notes = []
    if weights_bytes is None:
        figure = config_weight_bytes(replace(base, quantization=quant), config, quant)
        if base.architecture_known:
            weights_bytes = figure
            notes.append("byte size not found: the byte model's figure (no safetensors count "
                         "or index seen)")
        else:  # the generic decoder's figure for an unmodelled architecture misleads
            weights_bytes = 0
            notes.append(f"byte size not found, and the byte model has no rule for "
                         f"{base.architecture} yet (its generic figure, {figure / 2**30:.1f} "
                         "GiB, is not a size): 0 stands for unknown; rebuild this entry once "
                         "kvpilot models it")
    else:
        notes.append(how_counted)
    if scheme == SCHEME_NVFP4:
        notes.append(refusal(scheme, (8, 9)) or caveat(scheme, (8, 9)))
    bits = quant.bits if quant else 16
    group = quant.group_size if quant else None
    if scheme == SCHEME_NVFP4:  # the format: 4-bit floats, one scale per 16 weights
        bits, group = 4, NVFP4_GROUP_SIZE
    line: dict[str, Any] = {
        "repo": repo,
        "method": quant.method if quant else None,
        "bits": bits,
        "group_size": group,
        "weights_bytes": int(weights_bytes),
        "weights_source": "catalog" if "byte size not found" not in notes[0] else "estimate",
        "verified": "byte size not found" not in notes[0],
        "sources": list(sources),
        "note": "; ".join(n for n in notes if n),
        "scheme": scheme,
    }
    if revision:
        line["revision"] = revision
    return line


def make_entry(
    src: BuildSource, config: Mapping[str, Any], *, revision: str, sources: Sequence[str],
    base_weights_bytes: int | None, how_counted: str, variants: Iterable[HubCheckpoint] = (),
    license_hint: str = "", gated: bool = False, release_date: str = "",
) -> dict[str, Any]:
    """A catalog entry for ``src`` from its ``config.json`` and what was counted.

    Raises:
        CatalogBuildError: the config cannot be read as a model (no architecture, a missing
            field a term needs); the message names the repo.
    """
    try:
        base = spec_from_config(dict(config), model_id=src.id, source=f"hub:{src.id}@{revision}")
    except ModelSpecError as err:
        return _unreadable_entry(src, config, revision, sources, base_weights_bytes,
                                 how_counted, err.message, release_date)
    # the generic decoder's counts for an unmodelled architecture are no counts: 0 = unknown
    total, active = _params(base, config) if base.architecture_known else (0, 0)
    qcfg = config.get("quantization_config")
    checkpoints = [_checkpoint(base, config, src.id, qcfg if isinstance(qcfg, dict) else None,
                               base_weights_bytes, sources, revision, how_counted)]
    for v in variants:
        checkpoints.append(_checkpoint(
            base, config, v.repo, v.quantization_config, v.weights_bytes,
            [f"https://huggingface.co/{v.repo}/tree/{v.sha}" if v.sha else v.repo],
            v.sha, "weight bytes: the Hub's safetensors parameter count x dtype width"))
    notes = list(src.notes)
    if not base.architecture_known:
        notes.append(f"kvpilot has no memory rule for {base.architecture} yet: the recommender "
                     "does not rank it until it has")
    return {
        "id": src.id, "family": src.family,
        "release_date": src.release_date or release_date,
        "params_total": total, "params_active": active,
        "quality_tier": quality_tier(total, active),
        "license": src.license or license_hint or "unknown",
        "gated": bool(src.gated if src.gated is not None else gated),
        "context_length": base.derived_max_model_len,
        "verified": base.architecture_known,
        "verification": (f"built from config.json at {revision}" if revision else
                         "built from a public copy of config.json")
        + ("" if base.architecture_known else f"; {base.architecture} not yet modelled"),
        "sources": list(sources), "notes": notes, "config": dict(config),
        "checkpoints": checkpoints,
    }


def _unreadable_entry(
    src: BuildSource, config: Mapping[str, Any], revision: str, sources: Sequence[str],
    weights_bytes: int | None, how_counted: str, why: str, release_date: str,
) -> dict[str, Any]:
    """An entry for a config kvpilot cannot read as a model yet: listed (the recommender names
    it rejected with ``why``), its size only when one was counted; rebuild it once the planner
    reads the architecture."""
    archs = config.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else "this architecture"
    qcfg = config.get("quantization_config")
    scheme = scheme_of(qcfg if isinstance(qcfg, dict) else None)
    note = how_counted if weights_bytes is not None else (
        f"byte size not found, and the byte model cannot read {arch} yet ({why}): 0 stands for "
        "unknown; rebuild this entry once kvpilot plans it")
    text = config.get("text_config")
    length = (text if isinstance(text, dict) else config).get("max_position_embeddings")
    line: dict[str, Any] = {
        "repo": src.id, "method": None if scheme == SCHEME_16BIT else "compressed-tensors"
        if scheme == SCHEME_NVFP4 else scheme, "bits": 4 if scheme == SCHEME_NVFP4 else None,
        "group_size": NVFP4_GROUP_SIZE if scheme == SCHEME_NVFP4 else None,
        "weights_bytes": int(weights_bytes or 0),
        "weights_source": "catalog" if weights_bytes is not None else "estimate",
        "verified": weights_bytes is not None, "sources": list(sources), "note": note,
        "scheme": scheme,
    }
    if revision:
        line["revision"] = revision
    return {
        "id": src.id, "family": src.family, "release_date": src.release_date or release_date,
        "params_total": 0, "params_active": 0, "quality_tier": 1,
        "license": src.license or "unknown", "gated": bool(src.gated),
        "context_length": int(length) if isinstance(length, int) else 0,
        "verified": False,
        "verification": f"config.json copied, not yet readable by kvpilot: {why}",
        "sources": list(sources),
        "notes": [*src.notes, f"kvpilot cannot plan {arch} yet ({why}); parameters not counted"],
        "config": dict(config), "checkpoints": [line],
    }


def pick_variants(
    variants: Sequence[HubCheckpoint], src: BuildSource
) -> tuple[HubCheckpoint, ...]:
    """The variants to keep: ``src.variants`` when given, else the most downloaded of each
    catalog scheme, at most ``src.max_variants``."""
    if src.variants is not None:
        wanted = {r.lower() for r in src.variants}
        return tuple(v for v in variants if v.repo.lower() in wanted)
    best: dict[str, HubCheckpoint] = {}
    for v in sorted(variants, key=lambda v: -v.downloads):
        if v.scheme in CATALOG_SCHEMES and v.scheme not in best:
            best[v.scheme] = v
    return tuple(best.values())[: src.max_variants]


def entry_from_hub(
    src: BuildSource, api: HfApi | None = None, *, token: str | bool | None = None
) -> dict[str, Any]:
    """Build ``src`` from the Hub (``HF_ENDPOINT`` read now): pinned commit, config, counts,
    model tree.

    Raises:
        CatalogBuildError: the repo or its config.json cannot be read.
    """
    from huggingface_hub import HfApi, hf_hub_download

    from kvpilot.core.hub.download import _FINALIZE_NETWORK_ERRORS, resolve_endpoint
    from kvpilot.core.hub.search_fetch import HUB_ERRORS

    endpoint = api.endpoint if api is not None else resolve_endpoint()
    hub = api or HfApi(endpoint=endpoint, library_name="kvpilot")
    failed = (*HUB_ERRORS, *_FINALIZE_NETWORK_ERRORS)
    try:
        info = hub.model_info(src.id, revision=src.revision, token=token,
                              expand=list(INFO_EXPAND))  # type: ignore[arg-type]
        own = checkpoint_from_info(info)
        path = hf_hub_download(src.id, "config.json", revision=own.sha, token=token,
                               endpoint=endpoint)
        config = json.loads(Path(path).read_text(encoding="utf-8"))
        variants = quantized_variants(hub, src.id, token=token)
    except failed as err:
        raise CatalogBuildError(
            f"{src.id}: cannot read it from the Hub ({err.__class__.__name__}: {err})"
        ) from err
    card = info.card_data
    license_hint = str(getattr(card, "license", "") or "") if card is not None else ""
    sources = [f"https://huggingface.co/{src.id}/blob/{own.sha}/config.json"]
    kept = pick_variants([v for v in variants if v.scheme not in (SCHEME_16BIT, SCHEME_OTHER)],
                         src)
    return make_entry(
        src, config, revision=own.sha, sources=sources, base_weights_bytes=own.weights_bytes,
        how_counted="weight bytes: the Hub's safetensors parameter count x dtype width",
        variants=kept, license_hint=license_hint, gated=own.gated,
        release_date=own.created_at,
    )


def copy_folder(root: Path, repo_id: str) -> Path:
    """``<root>/<org>__<name>``."""
    return root / repo_id.replace("/", "__")


def entry_from_copies(src: BuildSource, root: Path) -> dict[str, Any]:
    """Build ``src`` from public copies under ``root`` (see the module docstring).

    Raises:
        CatalogBuildError: no config.json copy, or one that is not JSON.
    """
    folder = copy_folder(root, src.id)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CatalogBuildError(f"{src.id}: no readable config.json copy in {folder} ({err})") \
            from err
    hf_quant = folder / HF_QUANT_FILE
    if "quantization_config" not in config and hf_quant.is_file():
        # a ModelOpt checkpoint states its quantization in hf_quant_config.json (vLLM reads it)
        section = _read_json(src.id, hf_quant).get("quantization")
        if isinstance(section, dict):
            config = {**config, "quantization_config": {"quant_method": "modelopt", **section}}
    source_text = ""
    if (folder / SOURCE_FILE).is_file():
        source_text = " ".join((folder / SOURCE_FILE).read_text(encoding="utf-8").split())
    sources = [source_text or f"copy in {folder.name}/config.json (no SOURCE.txt)"]
    weights, how = _copied_weight_bytes(src.id, folder)
    return make_entry(src, config, revision=str(src.revision or ""), sources=sources,
                      base_weights_bytes=weights, how_counted=how)


def _read_json(src_id: str, path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CatalogBuildError(f"{src_id}: {path} is not readable JSON ({err})") from err
    if not isinstance(data, dict):
        raise CatalogBuildError(f"{src_id}: {path} is not a JSON object")
    return data


def _copied_weight_bytes(src_id: str, folder: Path) -> tuple[int | None, str]:
    """The weight bytes a copy folder states, and how they were counted ((None, "") if none).

    Raises:
        CatalogBuildError: a byte-count file that is unreadable or lacks its figure.
    """
    index = folder / INDEX_FILE
    if index.is_file():
        try:
            total = int(_read_json(src_id, index)["metadata"]["total_size"])
        except (KeyError, TypeError, ValueError) as err:
            raise CatalogBuildError(f"{src_id}: {index} has no metadata.total_size") from err
        return total, "weight bytes: metadata.total_size of the model.safetensors.index.json copy"
    counts = folder / HUB_SAFETENSORS_FILE
    if counts.is_file():
        data = _read_json(src_id, counts)
        params = data.get("parameters")
        if not isinstance(params, dict) or (total_or_none := weights_bytes_of(params)) is None:
            raise CatalogBuildError(
                f"{src_id}: {counts} needs \"parameters\": {{dtype: count}} with known dtypes")
        return total_or_none, ("weight bytes: the Hub's safetensors parameter counts "
                               f"({', '.join(f'{k} {v:,}' for k, v in params.items())}) "
                               "times each dtype's width, as quoted publicly")
    sizes = folder / FILE_SIZES_FILE
    if sizes.is_file():
        data = _read_json(src_id, sizes)
        files = data.get("files")
        shards = {n: v for n, v in (files if isinstance(files, dict) else {}).items()
                  if str(n).endswith(".safetensors")}
        if not shards or not all(isinstance(v, int) and v > 0 for v in shards.values()):
            raise CatalogBuildError(
                f"{src_id}: {sizes} needs \"files\": {{name: bytes}} with .safetensors files")
        files_said = "one .safetensors file" if len(shards) == 1 else \
            f"{len(shards)} .safetensors files summed"
        return sum(shards.values()), (
            f"weight bytes: the size of the {files_said} as quoted publicly (JSON headers "
            "included, a few hundred KB at most)")
    return None, ""


def merge(catalog: Mapping[str, Any], built: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``catalog`` with each built entry replacing the one of the same id, new ones appended."""
    entries = [dict(e) for e in catalog.get("entries", ())]
    index = {e["id"].lower(): i for i, e in enumerate(entries)}
    for entry in built:
        key = str(entry["id"]).lower()
        if key in index:
            entries[index[key]] = dict(entry)
        else:
            index[key] = len(entries)
            entries.append(dict(entry))
    return {**catalog, "entries": entries}
