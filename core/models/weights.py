"""Exact weight bytes of a checkpoint from safetensors headers, without reading any tensor.

A ``.safetensors`` file is an 8-byte little-endian header length ``n``, ``n`` bytes of JSON
(tensor name -> ``{"dtype", "shape", "data_offsets": [begin, end]}`` plus an optional
``__metadata__``), then the tensor data. Only the first ``8 + n`` bytes are read. Each tensor's
size is ``end - begin``, cross-checked against ``prod(shape) x dtype size``.

Where the shards are absent, ``model.safetensors.index.json`` gives ``metadata.total_size``.

Given the checkpoint's ``config.json``, the tensors vLLM's loader skips without speculative
decoding (the MTP block of Qwen3.5 / 3.6, Qwen3-Next, GLM-4.x and DeepSeek-V3-style checkpoints,
:mod:`.mtp_weights`) are left out of the total and reported in ``mtp_bytes``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

from kvpilot.core.base.errors import ModelSpecError
from kvpilot.core.base.model_spec import SOURCE_FILE, SOURCE_INDEX
from kvpilot.core.models.mtp_weights import (
    MtpRule,
    mtp_bytes_from_headers,
    mtp_rule,
    mtp_share_of_index,
)

INDEX_FILE = "model.safetensors.index.json"

#: safetensors dtype -> bits per element
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

#: the reference implementation refuses headers above 100 MB; so do we
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class WeightSize:
    """Bytes of weight tensors and where the figure came from.

    ``source`` is ``SOURCE_FILE`` (summed over safetensors headers) or ``SOURCE_INDEX``
    (``metadata.total_size`` of the index). ``files`` are the files that were read.
    ``total_bytes`` is what vLLM loads without speculative decoding; ``mtp_bytes`` the MTP
    tensors it skips (exact from headers, estimated per layer from an index alone), which MTP
    speculative decoding loads.
    """

    total_bytes: int
    source: str
    files: tuple[str, ...]
    tensor_count: int | None = None
    notes: tuple[str, ...] = ()
    mtp_bytes: int = 0
    #: the part of ``mtp_bytes`` that copies the embedding and output head (from headers
    #: only; :func:`kvpilot.core.models.mtp_weights.is_shared_copy`)
    mtp_shared_bytes: int = 0


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of one safetensors file (tensor entries and ``__metadata__``).

    Raises:
        ModelSpecError: the file cannot be read, is shorter than 8 bytes, declares a header
            longer than the file (truncated download) or holds a header that is not a JSON object.
    """
    return _read_header(path)[0]


def _read_header(path: Path) -> tuple[dict[str, Any], int, int]:
    """(header, declared header length, file size)."""
    where = str(path)
    try:
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelSpecError(
                    f"truncated safetensors file ({len(head)} bytes, no header length); "
                    "download the file again",
                    path=where,
                )
            (length,) = struct.unpack("<Q", head)
            size = path.stat().st_size
            if length == 0 or length > MAX_HEADER_BYTES or 8 + length > size:
                raise ModelSpecError(
                    f"truncated or corrupt safetensors header: it declares {length} bytes but the "
                    f"file holds {size} bytes; download the file again",
                    path=where,
                )
            raw = fh.read(length)
    except OSError as err:
        raise ModelSpecError(f"cannot read safetensors file: {err.strerror}", path=where) from err
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:  # nesting too deep too
        raise ModelSpecError(
            f"safetensors header is not valid JSON ({err}); download the file again", path=where
        ) from err
    if not isinstance(header, dict):
        raise ModelSpecError("safetensors header is not a JSON object", path=where)
    return header, length, size


def safetensors_tensor_bytes(path: Path) -> tuple[int, int]:
    """(bytes of all tensors, number of tensors) of one safetensors file, from its header.

    Raises:
        ModelSpecError: a malformed header (see :func:`read_safetensors_header`), a tensor entry
            without dtype/shape/data_offsets, an unknown dtype, offsets that disagree with
            shape x dtype, or tensor data reaching past the end of the file.
    """
    header, length, size = _read_header(path)
    where = str(path)
    data_bytes = size - 8 - length  # the data buffer follows the declared header
    total = 0
    count = 0
    max_end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise ModelSpecError(f"tensor entry '{name}' is not an object", path=where)
        try:
            dtype = entry["dtype"]
            shape = entry["shape"]
            begin, end = entry["data_offsets"]
        except (KeyError, TypeError, ValueError) as err:
            raise ModelSpecError(
                f"tensor '{name}' lacks dtype, shape or data_offsets [begin, end]", path=where
            ) from err
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise ModelSpecError(
                f"tensor '{name}' has unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})",
                path=where,
            )
        shape_ok = isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)
        if not shape_ok or not (
            isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end
        ):
            raise ModelSpecError(f"tensor '{name}' has an invalid shape or offsets", path=where)
        expected = -(-prod(shape) * DTYPE_BITS[dtype] // 8)
        if end - begin != expected:
            raise ModelSpecError(
                f"tensor '{name}': data_offsets span {end - begin} bytes but shape {shape} x "
                f"{dtype} needs {expected}; the file is corrupt",
                path=where,
            )
        total += end - begin
        count += 1
        max_end = max(max_end, end)
    if max_end > data_bytes:
        raise ModelSpecError(
            f"tensor data ends at byte {max_end} but the file holds only {data_bytes} bytes of "
            "data (incomplete download); download the file again",
            path=where,
        )
    return total, count


def _read_index(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ModelSpecError(f"cannot read index: {err.strerror}", path=str(path)) from err
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ModelSpecError(f"index is not valid JSON ({err})", path=str(path)) from err
    if not isinstance(data, dict):
        raise ModelSpecError("index is not a JSON object", path=str(path))
    return data


def _index_total(index: dict[str, Any], path: Path) -> int:
    meta = index.get("metadata")
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        raise ModelSpecError(
            "no positive metadata.total_size; download the safetensors shards so their headers "
            "can be read",
            path=str(path),
            field="metadata.total_size",
        )
    return total


def checkpoint_weight_size(
    directory: Path, config: Mapping[str, Any] | None = None
) -> WeightSize | None:
    """Weight bytes of the checkpoint in ``directory``, or None when it holds no safetensors.

    With ``config`` (its ``config.json``), the MTP tensors vLLM skips are left out (see
    :class:`WeightSize`).

    With an index file, only the shards it names count (as vLLM loads them; this skips e.g. a
    ``consolidated.safetensors`` duplicate). When none of them is present the index's
    ``metadata.total_size`` is used; when only some are, the index total is used and a note says so.

    Raises:
        ModelSpecError: a malformed shard header or index (see :func:`safetensors_tensor_bytes`).
    """
    rule = mtp_rule(config) if config is not None else None
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        index = _read_index(index_path)
        weight_map = index.get("weight_map")
        shard_names = (
            sorted({str(v) for v in weight_map.values()}) if isinstance(weight_map, dict) else []
        )
        present = [directory / n for n in shard_names if (directory / n).is_file()]
        if shard_names and len(present) == len(shard_names):
            return _sum_files(present, rule)
        total = _index_total(index, index_path)
        notes: tuple[str, ...] = ()
        if present:
            notes = (
                f"{len(present)} of {len(shard_names)} shards present; "
                "size taken from the index metadata",
            )
        mtp = 0
        if isinstance(weight_map, dict):
            mtp = mtp_share_of_index(rule, weight_map, total, _embedding_bytes(config))
        if mtp:
            notes = (*notes, _mtp_note(mtp, exact=False))
        return WeightSize(total - mtp, SOURCE_INDEX, (str(index_path),), None, notes, mtp)
    files = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    if not files:
        return None
    return _sum_files(files, rule)


def _sum_files(files: list[Path], rule: MtpRule | None = None) -> WeightSize:
    total = 0
    count = 0
    mtp = 0
    shared = 0
    for f in files:
        nbytes, n = safetensors_tensor_bytes(f)
        total += nbytes
        count += n
        if rule is not None:
            header = (read_safetensors_header(f),)
            mtp += mtp_bytes_from_headers(rule, header)
            shared += mtp_bytes_from_headers(rule, header, shared_copies_only=True)
    notes = (_mtp_note(mtp, exact=True),) if mtp else ()
    return WeightSize(total - mtp, SOURCE_FILE, tuple(str(f) for f in files), count, notes, mtp,
                      shared)


def _mtp_note(mtp_bytes: int, *, exact: bool) -> str:
    how = "from the safetensors headers" if exact else "estimated per layer from the index"
    return (f"{mtp_bytes / 2**30:.2f} GiB of MTP tensors ({how}) left out: vLLM loads them "
            "only with MTP speculative decoding")


def _embedding_bytes(config: Mapping[str, Any] | None) -> int:
    """16-bit bytes of the token embedding and an untied LM head, from ``config`` (0: unknown)."""
    if config is None:
        return 0
    text = config.get("text_config")
    section: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    vocab, hidden = section.get("vocab_size"), section.get("hidden_size")
    if not isinstance(vocab, int) or not isinstance(hidden, int):
        return 0
    tied = section.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
    return vocab * hidden * 2 * (1 if tied else 2)
