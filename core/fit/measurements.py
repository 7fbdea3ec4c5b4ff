"""Capacity numbers that vLLM itself reported, remembered per GPU, model, version and settings.

A measured dry run (``--load-format dummy``) and every real launch that reaches ``ready`` record
what vLLM printed (weights, available KV memory, KV tokens, maximum concurrency, graph memory).
The fit engine looks these up to say ``source: measured`` and to correct its predictions for
neighbouring settings by the measured offset.

The store is one JSON file (written atomically by ``paths.atomic_write_text``) holding a list of
``{"key": {...}, "measured": {...}}`` entries; a key that is recorded again replaces the old entry.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar, cast

from kvpilot.core.base.errors import KvpilotError, SettingsError
from kvpilot.core.base.paths import atomic_write_text, write_failure
from kvpilot.core.base.plan import ServingSettings, settings_dict, settings_from_dict
from kvpilot.core.base.versions import Release
from kvpilot.core.hub.identity import model_identity

log = logging.getLogger("kvpilot.measurements")

_T = TypeVar("_T")

#: 2: the serving settings nested under ``key.settings``, release numbers normalised
SCHEMA_VERSION = 2

#: ``Measured.source`` values
SOURCE_DRY_RUN = "dry_run"  # --load-format dummy, stopped right after the numbers were read
SOURCE_LAUNCH = "launch"  # a real launch that reached ready


@dataclass(frozen=True)
class MeasurementKey:
    """Everything a measured capacity depends on; build it with :func:`measurement_key`.

    ``gpu_name`` and ``gpu_total_bytes`` identify the device (``cpu`` and the RAM size for the
    CPU backend); ``model_id`` is the model's identity (:func:`kvpilot.core.hub.identity.
    model_identity`: the same for a catalog id, a Hub id and its snapshot folder);
    ``vllm_version`` the release number (``0.32.0``) and ``vllm_variant`` its build (``cpu``,
    informational: the device already tells them apart); ``settings`` the serving settings as
    given (None = vLLM's default for that release). ``weights_bytes`` is informational too.
    """

    gpu_name: str
    gpu_total_bytes: int
    model_id: str
    vllm_version: str
    settings: ServingSettings = field(default_factory=ServingSettings)
    vllm_variant: str | None = field(default=None, compare=False)
    weights_bytes: int | None = field(default=None, compare=False)

    def same_model(self, other: MeasurementKey) -> bool:
        """True when both keys are for the same device, model and vLLM release."""
        return (
            same_device(self.gpu_name, other.gpu_name)
            and self.gpu_total_bytes == other.gpu_total_bytes
            and self.model_id == other.model_id
            and self.vllm_version == other.vllm_version
        )


def same_device(a: str, b: str) -> bool:
    """True when two device names name the same card (``NVIDIA GeForce RTX 4090`` and
    ``RTX 4090``: vendor words and case do not count)."""

    def norm(name: str) -> str:
        words = [w for w in name.lower().split() if w not in ("nvidia", "geforce")]
        return " ".join(words)

    return norm(a) == norm(b)


def measurement_key(
    *,
    gpu_name: str,
    gpu_total_bytes: int,
    model: str,
    vllm_version: str | None,
    settings: ServingSettings,
    weights_bytes: int | None = None,
) -> MeasurementKey:
    """The one way to key a measurement: device, model identity, release, serving settings.

    ``model`` is a model identity or anything :func:`~kvpilot.core.hub.identity.
    model_identity` accepts (a snapshot folder, a repo id, a local folder); ``vllm_version``
    is normalised (``0.32.0+cpu`` -> release ``0.32.0``, variant ``cpu``). Only the serving
    settings of ``settings`` count (a PlanInputs or LaunchSpec may be passed).
    """
    release = Release.parse(vllm_version)
    return MeasurementKey(
        gpu_name=gpu_name,
        gpu_total_bytes=int(gpu_total_bytes),
        model_id=model_identity(model),
        vllm_version=release.number,
        settings=settings.settings,
        vllm_variant=release.variant,
        weights_bytes=weights_bytes,
    )


@dataclass(frozen=True)
class ReportedFigures:
    """The memory and KV-cache figures vLLM prints at start-up (bytes, tokens; None: not
    printed). ``kv_cache_tokens`` and ``max_concurrency`` are vLLM's "KV cache size: N tokens,
    Maximum concurrency for L tokens per request: Cx" (``concurrency_for_len`` is that L).
    Both what a server reported and what was stored of it carry them."""

    weights_bytes: int | None = None
    available_kv_bytes: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_for_len: int | None = None
    cudagraph_bytes: int | None = None
    num_blocks: int | None = None
    block_size: int | None = None
    #: free memory at vLLM's start-up snapshot ("Free memory on device (f/t GiB) on startup"):
    #: from 0.34 the extensible KV cache is sized from it, so a later plan moves the measured
    #: KV by the difference in free memory
    free_at_startup_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class Measured(ReportedFigures):
    """What vLLM reported for one key, as stored: the :class:`ReportedFigures` plus when, how
    (``source``: ``dry_run`` or ``launch``) and the start-up time in seconds.
    ``measured_at`` is an ISO-8601 UTC timestamp.
    """

    measured_at: str
    source: str
    startup_s: float | None = None

    @property
    def complete(self) -> bool:
        """True when the numbers the fit engine needs (KV memory and tokens) are all present."""
        return self.available_kv_bytes is not None and self.kv_cache_tokens is not None


#: the log scanner's names (``logparse.CapacityEvent``) of figures that are named differently here
_LOG_NAMES = {"max_concurrency_at_len": "concurrency_for_len", "num_gpu_blocks": "num_blocks"}


@dataclass(frozen=True)
class ReportedCapacity(ReportedFigures):
    """What a running vLLM server reported about its memory and KV cache (bytes, tokens): its
    log lines and, from 0.25, ``vllm:cache_config_info`` on ``/metrics``.

    Fields are None until vLLM printed them; ``sources`` names where the figures came from
    (``log``, ``metrics``). :func:`measured_from_reported` stores it as a :class:`Measured`.
    """

    kv_cache_memory_bytes: int | None = None
    sources: tuple[str, ...] = ()

    def merged(self, source: str, **values: object) -> ReportedCapacity:
        """A copy with the non-None ``values`` (named as the fields here) applied and
        ``source`` noted; names that are no field here are ignored."""
        known = {f.name for f in fields(self)}
        update: dict[str, Any] = {k: v for k, v in values.items() if k in known and v is not None}
        if not update:
            return self
        srcs = self.sources if source in self.sources else (*self.sources, source)
        return replace(self, **update, sources=srcs)

    @staticmethod
    def values_from_log(figures: Mapping[str, Any]) -> dict[str, Any]:
        """The log scanner's figures (``CapacityEvent.figures()``) under the names used here."""
        return {_LOG_NAMES.get(name, name): value for name, value in figures.items()}

    @property
    def empty(self) -> bool:
        """True while nothing was reported."""
        return not self.sources

    @property
    def kv_bytes(self) -> int | None:
        """The KV cache memory: ``cache_config_info``'s exact figure when there is one, else
        the log's (rounded to 0.01 GiB)."""
        if self.kv_cache_memory_bytes is not None:
            return self.kv_cache_memory_bytes
        return self.available_kv_bytes


def measured_from_reported(
    cap: ReportedCapacity, source: str, *, startup_s: float | None = None
) -> Measured:
    """The :class:`Measured` record of what a server reported (``source``: ``launch`` or
    ``dry_run``; ``startup_s``: seconds from start to ready)."""
    figures = {f.name: getattr(cap, f.name) for f in fields(ReportedFigures)}
    figures["available_kv_bytes"] = cap.kv_bytes  # the exact figure where there is one
    return Measured(measured_at=now_iso(), source=source, startup_s=startup_s, **figures)


def launch_recorder(
    store: MeasurementStore, key: MeasurementKey
) -> Callable[[ReportedCapacity, float | None], None]:
    """What a supervisor calls once its server is ready (``on_ready_capacity``): store what
    vLLM reported under the plan's ``key`` as a ``launch`` measurement. A store that cannot be
    written (a full disk, a damaged file) is logged as a warning; the server goes on serving."""

    def record(cap: ReportedCapacity, startup_s: float | None) -> None:
        try:
            store.record(key, measured_from_reported(cap, SOURCE_LAUNCH, startup_s=startup_s))
        except KvpilotError as exc:
            log.warning("the measured capacity was not recorded: %s", exc.message)

    return record


@dataclass(frozen=True)
class MeasurementRecord:
    """One stored entry."""

    key: MeasurementKey
    measured: Measured


def now_iso() -> str:
    """The current time as an ISO-8601 UTC string (seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _from_dict(cls: type[_T], data: dict[str, Any]) -> _T:
    """A ``cls`` dataclass from the keys of ``data`` it has (others are ignored)."""
    names = {f.name for f in fields(cast(Any, cls))}
    return cls(**{k: v for k, v in data.items() if k in names})


def _key_to_dict(key: MeasurementKey) -> dict[str, Any]:
    data = {f.name: getattr(key, f.name) for f in fields(key) if f.name != "settings"}
    data["settings"] = settings_dict(key.settings)
    return data


def _key_from_dict(data: dict[str, Any]) -> MeasurementKey:
    """A key from either schema: 2 nests the settings, 1 had them flat beside the device."""
    nested = data.get("settings")
    settings = settings_from_dict(nested if isinstance(nested, dict) else data)
    release = Release.parse(str(data["vllm_version"]))
    variant = data.get("vllm_variant", release.variant)
    return MeasurementKey(
        gpu_name=str(data["gpu_name"]),
        gpu_total_bytes=int(data["gpu_total_bytes"]),
        model_id=model_identity(str(data["model_id"])),
        vllm_version=release.number,
        settings=settings,
        vllm_variant=variant if isinstance(variant, str) else None,
        weights_bytes=data.get("weights_bytes"),
    )


class MeasurementStore:
    """The JSON file of measurements (thread-safe within one process).

    Raises:
        SettingsError: when the file exists but is not a measurement store (the message names
            the file; delete it to start over).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._newer = False  # the file was written by a newer kvpilot (schema above ours)

    def _read(self) -> list[MeasurementRecord]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):  # no file (its folder is not one either)
            return []
        except OSError as exc:
            raise SettingsError(
                f"cannot read {self.path}: {exc.strerror or exc}; check its permissions, or "
                "delete it to start over"
            ) from exc
        try:
            data = json.loads(raw)
            self._newer = isinstance(data.get("schema"), int) and data["schema"] > SCHEMA_VERSION
            entries = data["entries"]
            return [
                MeasurementRecord(key=_key_from_dict(e["key"]),
                                  measured=_from_dict(Measured, e["measured"]))
                for e in entries
            ]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise SettingsError(
                f"{self.path}: not a kvpilot measurement file ({exc}); delete it to start over"
            ) from exc

    def _write(self, records: list[MeasurementRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "schema": SCHEMA_VERSION,
            "entries": [
                {"key": _key_to_dict(r.key), "measured": asdict(r.measured)} for r in records
            ],
        }
        text = json.dumps(payload, indent=1, sort_keys=True)
        try:
            atomic_write_text(self.path, text)
        except OSError as exc:
            raise SettingsError(
                write_failure(self.path, exc, len(text), env_var="KVPILOT_DATA_DIR")
            ) from exc

    def record(self, key: MeasurementKey, measured: Measured) -> None:
        """Store ``measured`` under ``key``, replacing an earlier entry with the same key."""
        with self._lock:
            records = [r for r in self._read() if r.key != key]
            if self._newer:
                # writing back would drop what the newer version keeps there
                raise SettingsError(
                    f"{self.path} was written by a newer kvpilot; it is left unchanged and "
                    "this measurement is not recorded (update kvpilot to record it)"
                )
            records.append(MeasurementRecord(key, measured))
            self._write(records)

    def lookup(self, key: MeasurementKey) -> Measured | None:
        """The measurement stored for exactly this key, or None."""
        with self._lock:
            for r in self._read():
                if r.key == key:
                    return r.measured
        return None

    def for_model(self, key: MeasurementKey) -> list[MeasurementRecord]:
        """All measurements for ``key``'s device, model and vLLM release (any settings),
        newest first."""
        with self._lock:
            found = [r for r in self._read() if r.key.same_model(key)]
        return sorted(found, key=lambda r: r.measured.measured_at, reverse=True)

    def all(self) -> list[MeasurementRecord]:
        """Every stored measurement, in file order."""
        with self._lock:
            return self._read()
