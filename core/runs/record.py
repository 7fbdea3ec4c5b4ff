"""One server run as a record: what was launched, what vLLM reported, the load tests, the end.

A :class:`RunRecord` is written as ``<data dir>/runs/<id>.json`` (:mod:`kvpilot.core.runs.store`)
when a server is launched (``state`` ``running``), again when vLLM reports its capacity or a
load test finishes against it, and a last time when the run ends (``stopped`` or ``failed``).
A record left ``running`` by a kvpilot that was killed reads as ``lost`` once its process is
gone. Times are ISO-8601 UTC; sizes in bytes; rates in tokens per second; latencies in seconds.

No secret is ever part of a record: the settings are the ``vllm serve`` settings
(:class:`~kvpilot.core.base.plan.ServingSettings`), the extra arguments are those kvpilot accepts
(a key flag is refused there), and the API key and token are not fields of anything here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.plan import ServingSettings, settings_from_dict

if TYPE_CHECKING:
    from kvpilot.core.base.plan import Capacity
    from kvpilot.core.fit.measurements import ReportedCapacity
    from kvpilot.core.vllm.client import LoadTestReport

_T = TypeVar("_T")

FORMAT = "kvpilot-run"
VERSION = 1
RUNNING = "running"
STOPPED = "stopped"
FAILED = "failed"
#: a record left ``running`` whose kvpilot process is gone (killed, machine off)
LOST = "lost"
STATES = (RUNNING, STOPPED, FAILED, LOST)


class RunRecordError(KvpilotError):
    """A run record that cannot be read (damaged, from an unknown format)."""


@dataclass(frozen=True)
class LevelSummary:
    """One concurrency level of a load test (see :class:`~kvpilot.core.vllm.client.LevelResult`):
    rates per second, latencies in seconds, energy in joules per generated token."""

    concurrency: int
    requests_ok: int
    errors: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p90_s: float | None = None
    tpot_p99_s: float | None = None
    e2e_p99_s: float | None = None
    j_per_token: float | None = None
    mean_power_w: float | None = None
    throttled: bool | None = None
    throttle_reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class LoadTestSummary:
    """A load test run against the server: when (``at``), its shape and its levels."""

    at: str
    api: str
    prompt_tokens: int
    output_tokens: int
    ttft_slo_s: float
    tpot_slo_s: float
    levels: tuple[LevelSummary, ...]
    slo_break_concurrency: int | None = None
    cancelled: bool = False
    source: str = "cli"


@dataclass(frozen=True)
class SeriesSummary:
    """One telemetry series over the run, downsampled: ``t_s`` seconds since the first point,
    ``y`` the mean of each bin (None: a gap), and the mean, min and max of the whole series."""

    unit: str
    mean: float | None
    min: float | None
    max: float | None
    t_s: tuple[float, ...] = ()
    y: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class RunRecord:
    """One server run. ``settings`` are the ``vllm serve`` settings launched (ServingSettings
    field -> value); ``predicted`` and ``reported`` the capacity the plan predicted and the one
    vLLM reported (``kv_cache_tokens``, ``max_concurrency``, ``available_kv_bytes``, ...);
    ``ended_how`` one of :data:`STATES`, ``failure_kind``/``failure_message`` why it failed;
    ``swaps`` what a front's swaps did with it (why it was started or woken, how long the first
    request waited, how long it took to load)."""

    id: str
    started_at: str
    model: str
    state: str = RUNNING
    ended_at: str | None = None
    profile: str | None = None
    source: str = "cli"
    served_model_name: str = ""
    base_url: str = ""
    owner_pid: int | None = None
    vllm_pid: int | None = None
    runtime_version: str = ""
    runtime_path: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    predicted: Mapping[str, Any] = field(default_factory=dict)
    reported: Mapping[str, Any] = field(default_factory=dict)
    startup_s: float | None = None
    fallbacks: tuple[str, ...] = ()
    failure_kind: str | None = None
    failure_message: str | None = None
    load_tests: tuple[LoadTestSummary, ...] = ()
    telemetry: Mapping[str, SeriesSummary] = field(default_factory=dict)
    #: a front's bring-ups of this server (:class:`kvpilot.core.front.pool.SwapRecord` as JSON:
    #: at, kind ``start``/``wake``, reason, wait_s, load_s, made_room, ok, failure_kind)
    swaps: tuple[Mapping[str, Any], ...] = ()

    @property
    def best_tokens_per_s(self) -> float | None:
        """The highest output tokens/s any load test reached (None without one)."""
        rates = [lv.output_tokens_per_s for t in self.load_tests for lv in t.levels]
        return max(rates) if rates else None

    def levels_by_concurrency(self) -> dict[int, LevelSummary]:
        """The newest load test's level at each concurrency (older tests fill in the rest)."""
        out: dict[int, LevelSummary] = {}
        for test in self.load_tests:  # oldest first: newer ones replace
            for lv in test.levels:
                out[lv.concurrency] = lv
        return out

    def serving_settings(self) -> ServingSettings:
        """The ``vllm serve`` settings this run launched, to launch them again.

        Raises:
            RunRecordError: a stored setting has the wrong type.
        """
        try:
            return settings_from_dict(self.settings)
        except (TypeError, ValueError) as exc:
            raise RunRecordError(f"run {self.id}: its settings cannot be used ({exc})") from exc

    def with_load_test(self, test: LoadTestSummary) -> RunRecord:
        return replace(self, load_tests=(*self.load_tests, test))

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to disk."""
        out: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "load_tests":
                value = [asdict(t) for t in value]
            elif f.name == "telemetry":
                value = {k: asdict(v) for k, v in value.items()}
            elif f.name == "swaps":
                value = [dict(v) for v in value]
            elif isinstance(value, Mapping):
                value = dict(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return {k: _finite(v) for k, v in out.items()}


def _finite(value: object) -> object:
    """NaN and infinities become None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _build(cls: type[_T], raw: object, where: str) -> _T:
    if not isinstance(raw, dict):
        raise RunRecordError(f"{where}: not an object")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]  # always a dataclass
    values = {k: v for k, v in raw.items() if k in known}
    for k, v in list(values.items()):
        if isinstance(v, list):
            values[k] = tuple(v)
    try:
        return cls(**values)
    except TypeError as exc:
        raise RunRecordError(f"{where}: {exc}") from exc


def _check(obj: RunRecord | LevelSummary | LoadTestSummary, where: str) -> None:
    """Field types as declared, for what can be checked cheaply (str, int, float, bool)."""
    for f in fields(obj):
        value = getattr(obj, f.name)
        kind = str(f.type)
        if value is None:
            if "None" not in kind:
                raise RunRecordError(f"{where}.{f.name}: missing")
            continue
        if kind.startswith("str") and not isinstance(value, str):
            raise RunRecordError(f"{where}.{f.name}: not text")
        if kind.startswith("int") and (isinstance(value, bool) or not isinstance(value, int)):
            raise RunRecordError(f"{where}.{f.name}: not a whole number")
        if kind.startswith("float") and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            raise RunRecordError(f"{where}.{f.name}: not a number")


def record_from_json(raw: object) -> RunRecord:
    """A :class:`RunRecord` from its JSON object; unknown keys are ignored.

    Raises:
        RunRecordError: not a run record of a known version, or a field of the wrong type.
    """
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise RunRecordError("not a kvpilot run record")
    if raw.get("version") != VERSION:
        raise RunRecordError(f"run record version {raw.get('version')!r} is not {VERSION}")
    body = dict(raw)
    tests = body.pop("load_tests", []) or []
    swaps = body.pop("swaps", []) or []
    if not isinstance(swaps, list) or not all(isinstance(x, dict) for x in swaps):
        raise RunRecordError("swaps has the wrong shape")
    telemetry = body.pop("telemetry", {}) or {}
    if not isinstance(tests, list) or not isinstance(telemetry, dict):
        raise RunRecordError("load_tests or telemetry has the wrong shape")
    for name in ("settings", "predicted", "reported"):
        if not isinstance(body.get(name, {}), dict):
            raise RunRecordError(f"{name}: not an object")
    record: RunRecord = _build(RunRecord, body, "record")
    _check(record, "record")
    if record.state not in STATES:
        raise RunRecordError(f"record.state: {record.state!r} is none of {', '.join(STATES)}")
    parsed_tests = []
    for i, t in enumerate(tests):
        where = f"load_tests[{i}]"
        levels = t.get("levels", []) if isinstance(t, dict) else None
        if not isinstance(levels, list):
            raise RunRecordError(f"{where}.levels: not a list")
        lv = tuple(_build(LevelSummary, x, f"{where}.levels") for x in levels)
        for x in lv:
            _check(x, f"{where}.levels")
        test = _build(LoadTestSummary, {**t, "levels": lv}, where)
        _check(test, where)
        parsed_tests.append(test)
    series = {}
    for name, s in telemetry.items():
        one = _build(SeriesSummary, s, f"telemetry.{name}")
        series[str(name)] = one
    return replace(record, load_tests=tuple(parsed_tests), telemetry=series, swaps=tuple(swaps))


def summary_of_report(report: LoadTestReport, at: str, source: str) -> LoadTestSummary:
    """The :class:`LoadTestSummary` of a :class:`~kvpilot.core.vllm.client.LoadTestReport`."""
    levels = []
    for lv in report.levels:
        gpu = lv.gpu
        levels.append(LevelSummary(
            concurrency=lv.concurrency, requests_ok=lv.requests_ok, errors=lv.errors,
            output_tokens_per_s=float(lv.output_tokens_per_s),
            requests_per_s=float(lv.requests_per_s),
            ttft_p50_s=lv.ttft_p50_s, ttft_p90_s=lv.ttft_p90_s, ttft_p99_s=lv.ttft_p99_s,
            tpot_p50_s=lv.tpot_p50_s, tpot_p90_s=lv.tpot_p90_s, tpot_p99_s=lv.tpot_p99_s,
            e2e_p99_s=lv.e2e_p99_s,
            j_per_token=gpu.j_per_token if gpu is not None else None,
            mean_power_w=gpu.mean_power_w if gpu is not None else None,
            throttled=gpu.throttled if gpu is not None else None,
            throttle_reasons=tuple(gpu.throttle_reasons) if gpu is not None else (),
        ))
    return LoadTestSummary(
        at=at, api=report.api, prompt_tokens=report.prompt_tokens_target,
        output_tokens=report.output_tokens_target, ttft_slo_s=report.ttft_slo_s,
        tpot_slo_s=report.tpot_slo_s, levels=tuple(levels),
        slo_break_concurrency=report.slo_break_concurrency, cancelled=report.cancelled,
        source=source,
    )


def capacity_dict(obj: Capacity | ReportedCapacity, names: Sequence[str]) -> dict[str, Any]:
    """``{name: value}`` of the named attributes of a capacity that are set."""
    out = {}
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            out[name] = value
    return out


#: the capacity figures a record keeps of the plan and of what vLLM reported
CAPACITY_FIELDS = (
    "kv_cache_tokens", "max_concurrency", "available_kv_bytes", "weights_bytes",
    "cudagraph_bytes", "num_blocks", "block_size", "gpu_memory_utilization", "max_model_len",
)
