"""Capacity numbers that vLLM itself reported, remembered per GPU, model, version and settings.

A measured dry run (``--load-format dummy``) and every real launch that reaches ``ready`` record
what vLLM printed (weights, available KV memory, KV tokens, maximum concurrency, graph memory).
The fit engine looks these up to say ``source: measured`` and to correct its predictions for
neighbouring settings by the measured offset.

The store is one JSON file (written atomically: temporary file + ``os.replace``) holding a list of
``{"key": {...}, "measured": {...}}`` entries; a key that is recorded again replaces the old entry.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kvpilot.core.errors import SettingsError

SCHEMA_VERSION = 1

#: ``Measured.source`` values
SOURCE_DRY_RUN = "dry_run"  # --load-format dummy, stopped right after the numbers were read
SOURCE_LAUNCH = "launch"  # a real launch that reached ready


@dataclass(frozen=True)
class MeasurementKey:
    """Everything a measured capacity depends on.

    ``gpu_name`` and ``gpu_total_bytes`` identify the device (``cpu`` and the RAM size for the CPU
    backend); ``model_id`` is the model as the user named it and ``weights_bytes`` its checkpoint
    size (None when unknown). The remaining fields are the settings that change vLLM's memory
    layout; None means "vLLM's default for this version".
    """

    gpu_name: str
    gpu_total_bytes: int
    model_id: str
    vllm_version: str
    weights_bytes: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = "auto"
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    quantization: str | None = None

    def matches_model(self, gpu_name: str, model_id: str, vllm_version: str) -> bool:
        """True when this key is for that GPU name, model and vLLM version."""
        return (
            self.gpu_name == gpu_name
            and self.model_id == model_id
            and self.vllm_version == vllm_version
        )


@dataclass(frozen=True)
class Measured:
    """What vLLM reported for one key. Memory in bytes; None when vLLM did not print it.

    ``kv_cache_tokens`` and ``max_concurrency`` are vLLM's "KV cache size: N tokens, Maximum
    concurrency for L tokens per request: Cx" (``concurrency_for_len`` is that L).
    ``measured_at`` is an ISO-8601 UTC timestamp; ``source`` is ``dry_run`` or ``launch``.
    """

    measured_at: str
    source: str
    weights_bytes: int | None = None
    available_kv_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_for_len: int | None = None
    cudagraph_bytes: int | None = None
    num_blocks: int | None = None
    block_size: int | None = None
    startup_s: float | None = None

    @property
    def complete(self) -> bool:
        """True when the numbers the fit engine needs (KV memory and tokens) are all present."""
        return self.available_kv_bytes is not None and self.kv_cache_tokens is not None


@dataclass(frozen=True)
class MeasurementRecord:
    """One stored entry."""

    key: MeasurementKey
    measured: Measured


def now_iso() -> str:
    """The current time as an ISO-8601 UTC string (seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _from_dict(cls: type[Any], data: dict[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


class MeasurementStore:
    """The JSON file of measurements (thread-safe within one process).

    Raises:
        SettingsError: when the file exists but is not a measurement store (the message names
            the file; delete it to start over).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def _read(self) -> list[MeasurementRecord]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        try:
            data = json.loads(raw)
            entries = data["entries"]
            return [
                MeasurementRecord(
                    key=_from_dict(MeasurementKey, e["key"]),
                    measured=_from_dict(Measured, e["measured"]),
                )
                for e in entries
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise SettingsError(
                f"{self.path}: not a kvpilot measurement file ({exc}); delete it to start over"
            ) from exc

    def _write(self, records: list[MeasurementRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "schema": SCHEMA_VERSION,
            "entries": [{"key": asdict(r.key), "measured": asdict(r.measured)} for r in records],
        }
        fd, tmp = tempfile.mkstemp(prefix=".measurements.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            Path(tmp).replace(self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def record(self, key: MeasurementKey, measured: Measured) -> None:
        """Store ``measured`` under ``key``, replacing an earlier entry with the same key."""
        with self._lock:
            records = [r for r in self._read() if r.key != key]
            records.append(MeasurementRecord(key, measured))
            self._write(records)

    def lookup(self, key: MeasurementKey) -> Measured | None:
        """The measurement stored for exactly this key, or None."""
        with self._lock:
            for r in self._read():
                if r.key == key:
                    return r.measured
        return None

    def for_model(
        self,
        gpu_name: str,
        model_id: str,
        vllm_version: str,
        *,
        gpu_total_bytes: int | None = None,
    ) -> list[MeasurementRecord]:
        """All measurements for a GPU, model and vLLM version, newest first."""
        with self._lock:
            found = [
                r
                for r in self._read()
                if r.key.matches_model(gpu_name, model_id, vllm_version)
                and (gpu_total_bytes is None or r.key.gpu_total_bytes == gpu_total_bytes)
            ]
        return sorted(found, key=lambda r: r.measured.measured_at, reverse=True)

    def all(self) -> list[MeasurementRecord]:
        """Every stored measurement, in file order."""
        with self._lock:
            return self._read()
