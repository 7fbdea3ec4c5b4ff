"""Live telemetry on one timeline: vLLM ``/metrics`` samples and NVML samples.

Samples arrive from two producer threads (the metrics sampler and the hardware sampler) and are
turned into plot-ready series kept in fixed-capacity numpy ring buffers, so memory is bounded
however long the server runs (24 h at 2 Hz by default, about 22 MB reserved, resident only as
rows are written: 0.9 MB an hour at 2 Hz). NaN marks a gap (scrape
failed, server restarting, stats disabled), never zero.

Derived vLLM series (all per sample, names as in :data:`SERIES`):

* ``generation_tokens_per_s`` / ``prompt_tokens_per_s``: counter increases over ``rate_window_s``.
  A counter that goes down was reset (server restart): its new value counts as the increase, as
  Prometheus ``rate()`` does, so a rate is never negative.
* ``running``, ``waiting``, ``kv_usage_frac`` (0..1) as scraped.
* ``preemptions_per_min``, ``prefix_hit_rate`` (0..1), ``success_rate`` (0..1: finished with
  stop/length/repetition over all finished) over ``window_s``.
* ``{ttft,itl,e2e,tpot}_{p50,p90,p99}_s``: quantiles of the histogram bucket increases over
  ``window_s``, interpolated inside buckets like Prometheus ``histogram_quantile``.

GPU series: ``memory_used_bytes``, ``memory_total_bytes``, ``vllm_memory_bytes`` (sum of the
per-process bytes of the vLLM process tree, see :meth:`Telemetry.set_vllm_pids`),
``other_memory_bytes``, ``gpu_util_percent``, ``power_w``, ``power_limit_w``, ``temperature_c``,
``sm_clock_mhz``, ``throttle_reasons_mask`` (NVML's clock-event reason bits, as a float) and
``throttled`` (1 when a reason that slows the card is set, 0 when none is, NaN when not
reported; see :mod:`kvpilot.core.base.throttle`). GPU samples are read duck-typed (any
object with ``t_monotonic_s``, ``memory_used_bytes``, ...).

Readers (the GUI's timer) call :meth:`Telemetry.series` and :meth:`Telemetry.latest`; both take a
lock for microseconds and return copies.
"""

from __future__ import annotations

import csv
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvpilot.core.base.throttle import is_throttled
from kvpilot.core.fit.extensible_kv import LaunchCap, headroom_warning
from kvpilot.core.vllm.metrics import (
    DISABLED_STATS_MESSAGE,
    HistogramSnapshot,
    MetricsSample,
    ScrapeError,
)

__all__ = [
    "GPU_SERIES",
    "SERIES",
    "VLLM_SERIES",
    "PressureSignal",
    "Telemetry",
    "TelemetryConfig",
    "TelemetrySummary",
    "histogram_quantile",
]

_QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
_HISTS = ("ttft", "itl", "e2e", "tpot")
_OK_REASONS = frozenset({"stop", "length", "repetition"})

#: vLLM-derived series -> unit
VLLM_SERIES: dict[str, str] = {
    "running": "requests",
    "waiting": "requests",
    "kv_usage_frac": "fraction",
    "generation_tokens_per_s": "tokens/s",
    "prompt_tokens_per_s": "tokens/s",
    "preemptions_per_min": "1/min",
    "prefix_hit_rate": "fraction",
    "success_rate": "fraction",
    **{f"{h}_{q}_s": "s" for h in _HISTS for q, _ in _QUANTILES},
}
#: NVML series -> unit
GPU_SERIES: dict[str, str] = {
    "memory_used_bytes": "bytes",
    "memory_total_bytes": "bytes",
    "vllm_memory_bytes": "bytes",
    "other_memory_bytes": "bytes",
    "gpu_util_percent": "%",
    "power_w": "W",
    "power_limit_w": "W",
    "temperature_c": "°C",
    "sm_clock_mhz": "MHz",
    "throttle_reasons_mask": "bitmask",
    "throttled": "flag",
}
SERIES: dict[str, str] = {**VLLM_SERIES, **GPU_SERIES}

_COUNTER_FIELDS = (
    "generation_tokens_total",
    "prompt_tokens_total",
    "preemptions_total",
    "prefix_queries_total",
    "prefix_hits_total",
)


@dataclass(frozen=True)
class TelemetryConfig:
    """Sizes, windows and alarm thresholds.

    ``capacity`` rows per ring buffer (24 h at 2 Hz = 172,800); ``rate_window_s`` for tokens/s;
    ``window_s`` for percentiles, preemptions, prefix and success rates and pressure trends.
    """

    capacity: int = 24 * 3600 * 2
    rate_window_s: float = 5.0
    window_s: float = 60.0
    ttft_goal_s: float = 1.0
    kv_full_frac: float = 0.90
    vram_full_frac: float = 0.92
    gpu_idle_percent: float = 30.0
    other_growth_bytes: float = 256 * 1024**2

    def __post_init__(self) -> None:
        if self.capacity < 2:
            raise ValueError("capacity must be >= 2 rows")
        if self.rate_window_s <= 0 or self.window_s <= 0:
            raise ValueError("windows must be > 0 seconds")


@dataclass(frozen=True)
class PressureSignal:
    """A condition the user should act on, with the setting that fixes it.

    ``kind`` is one of ``kv_full``, ``preemptions``, ``cpu_bound``, ``vram_full``,
    ``desktop_headroom`` (vLLM 0.34 launched with a cap: free memory fell under the room it
    left other programs).
    """

    kind: str
    message: str
    fix: str
    value: float


@dataclass(frozen=True)
class TelemetrySummary:
    """The latest values of every series plus status; ``None`` where unknown."""

    t_monotonic_s: float | None
    has_vllm_metrics: bool | None
    status_message: str | None
    last_scrape_error: str | None
    values: Mapping[str, float | None]
    finish_reason_fractions: Mapping[str, float]
    generation_tokens_session: float
    prompt_tokens_session: float
    cache_config: Mapping[str, str]
    model_name: str | None
    pressure: tuple[PressureSignal, ...] = field(default_factory=tuple)

    def __getitem__(self, name: str) -> float | None:
        return self.values.get(name)


def histogram_quantile(q: float, upper_bounds: Sequence[float], counts: Sequence[float]) -> float:
    """Quantile ``q`` (0..1) of a cumulative histogram, interpolated like Prometheus.

    ``counts`` are cumulative per ``upper_bounds`` (ascending, last ``inf``). Returns NaN when
    the histogram is empty; the highest finite bound when the quantile falls in the +Inf bucket.
    """
    if not counts or not 0.0 <= q <= 1.0:
        return math.nan
    total = counts[-1]
    if not total > 0:
        return math.nan
    rank = q * total
    for i, (upper, cum) in enumerate(zip(upper_bounds, counts, strict=True)):
        if cum >= rank:
            if math.isinf(upper):
                return upper_bounds[i - 1] if i > 0 else math.nan
            lower = upper_bounds[i - 1] if i > 0 else 0.0
            below = counts[i - 1] if i > 0 else 0.0
            if i == 0 and upper <= 0:
                return upper
            in_bucket = cum - below
            if in_bucket <= 0:
                return upper
            return lower + (upper - lower) * (rank - below) / in_bucket
    return upper_bounds[-2] if len(upper_bounds) > 1 else math.nan


class _Ring:
    """Fixed-capacity time-ordered rows: float64 times, float32 value columns.

    The arrays are reserved, not written, at construction (``np.empty``: the system maps a
    page the first time a row on it is written), and only the ``size`` rows written are ever
    read: a new window costs neither the 22 MB of its 24-hour rings nor the time to fill them.
    """

    def __init__(self, columns: Sequence[str], capacity: int) -> None:
        self.columns = {name: i for i, name in enumerate(columns)}
        self.capacity = capacity
        self._allocate()

    def _allocate(self) -> None:
        self.t = np.empty(self.capacity, dtype=np.float64)
        self.y = np.empty((len(self.columns), self.capacity), dtype=np.float32)
        self.head = 0
        self.size = 0

    @property
    def nbytes(self) -> int:
        return int(self.t.nbytes + self.y.nbytes)

    def last_t(self) -> float:
        return float(self.t[self.head - 1]) if self.size else -math.inf

    def append(self, t: float, row: Mapping[str, float | None]) -> None:
        t = max(t, self.last_t())  # keep the ring sorted even if a clock steps back
        i = self.head
        self.t[i] = t
        self.y[:, i] = np.nan
        for name, value in row.items():
            if value is not None:
                self.y[self.columns[name], i] = value
        self.head = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def _ordered_range(self, t0: float) -> list[slice]:
        if self.size < self.capacity:
            i = int(np.searchsorted(self.t[: self.size], t0, side="left"))
            return [slice(i, self.size)]
        head = self.head
        if head > 0 and t0 >= self.t[0]:
            i = int(np.searchsorted(self.t[:head], t0, side="left"))
            return [slice(i, head)]
        j = int(np.searchsorted(self.t[head:], t0, side="left"))
        return [slice(head + j, self.capacity), slice(0, head)]

    def window(self, column: str, t0: float) -> tuple[np.ndarray, np.ndarray]:
        col = self.columns[column]
        parts = self._ordered_range(t0)
        if len(parts) == 1:
            return self.t[parts[0]].copy(), self.y[col, parts[0]].copy()
        return (
            np.concatenate([self.t[p] for p in parts]),
            np.concatenate([self.y[col, p] for p in parts]),
        )

    def all_rows(self) -> tuple[np.ndarray, np.ndarray]:
        parts = self._ordered_range(-math.inf)
        return (
            np.concatenate([self.t[p] for p in parts]),
            np.concatenate([self.y[:, p] for p in parts], axis=1),
        )

    def clear(self) -> None:
        self._allocate()  # fresh pages: what the old session had written goes back too


@dataclass
class _Interval:
    """Increments of one scrape interval (reset-corrected)."""

    t_start: float
    t_end: float
    counters: dict[str, float]
    success: dict[str, float]
    hists: dict[str, np.ndarray | None]


class _WindowSums:
    """The intervals of a sliding window and the running sums of their increments.

    Increments are whole counts (tokens, requests, observations), so adding and later
    subtracting them leaves the sums exact.
    """

    def __init__(self) -> None:
        self.intervals: deque[_Interval] = deque()
        self.counters: dict[str, float] = dict.fromkeys(_COUNTER_FIELDS, 0.0)
        self.success: dict[str, float] = {}
        self.hists: dict[str, np.ndarray] = {}

    def push(self, iv: _Interval) -> None:
        self.intervals.append(iv)
        self._apply(iv, 1.0)

    def prune(self, horizon: float) -> None:
        while self.intervals and self.intervals[0].t_end <= horizon:
            self._apply(self.intervals.popleft(), -1.0)

    def _apply(self, iv: _Interval, sign: float) -> None:
        for name, inc in iv.counters.items():
            self.counters[name] += sign * inc
        for reason, inc in iv.success.items():
            self.success[reason] = self.success.get(reason, 0.0) + sign * inc
        for h, arr in iv.hists.items():
            if arr is None:
                continue
            acc = self.hists.get(h)
            if acc is not None and acc.shape == arr.shape:
                acc += sign * arr
            elif sign > 0:  # first histogram, or the bucket layout changed: rebuild
                rebuilt = np.zeros(arr.shape)
                for other in self.intervals:
                    other_arr = other.hists.get(h)
                    if other_arr is not None and other_arr.shape == arr.shape:
                        rebuilt += other_arr
                self.hists[h] = rebuilt


def _increase(cur: float | None, prev: float | None) -> float:
    if cur is None:
        return 0.0
    if prev is None or cur < prev:  # new counter, or reset: the new value is the increase
        return cur
    return cur - prev


def _hist_increase(
    cur: HistogramSnapshot | None, prev: HistogramSnapshot | None
) -> np.ndarray | None:
    if cur is None:
        return None
    now = np.asarray(cur.cumulative_counts, dtype=np.float64)
    if prev is None or prev.upper_bounds != cur.upper_bounds:
        return now
    before = np.asarray(prev.cumulative_counts, dtype=np.float64)
    if np.any(now < before):
        return now
    return now - before


def _process_bytes(sample: Any) -> dict[int, float | None] | None:
    """pid -> used bytes (None: not reported) from a duck-typed GPU sample; None if absent."""
    for attr in ("process_used_bytes", "per_process_used_bytes", "processes"):
        procs = getattr(sample, attr, None)
        if procs is None:
            continue
        if isinstance(procs, Mapping):
            return {int(pid): _num(b) for pid, b in procs.items()}
        out: dict[int, float | None] = {}
        for proc in procs:
            pid = getattr(proc, "pid", None)
            used = getattr(proc, "used_bytes", None)
            if used is None:
                used = getattr(proc, "used_memory_bytes", None)
            if pid is not None:
                before = out.get(int(pid), 0.0)
                value = _num(used)
                out[int(pid)] = None if before is None or value is None else before + value
        return out
    return None


def _tree_bytes(procs: Mapping[int, float | None], pids: frozenset[int]) -> float | None:
    """Bytes held by ``pids``; None when any of them has an unreported amount."""
    total = 0.0
    for pid in pids & procs.keys():
        value = procs[pid]
        if value is None:
            return None
        total += value
    return total


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


class Telemetry:
    """Ring buffers and derived series for one server session. Thread-safe.

    Producers call :meth:`add_vllm_sample` / :meth:`add_scrape_error` (metrics thread) and
    :meth:`add_gpu_sample` / :meth:`add_gpu_gap` (hardware thread). Readers call
    :meth:`series`, :meth:`latest` and the exports.
    """

    def __init__(
        self,
        config: TelemetryConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or TelemetryConfig()
        self._clock = clock
        self._lock = threading.Lock()
        self._vllm = _Ring(list(VLLM_SERIES), self.config.capacity)
        self._gpu = _Ring(list(GPU_SERIES), self.config.capacity)
        self.wall_offset_s = time.time() - time.monotonic()
        self._vllm_pids: frozenset[int] = frozenset()
        self._launch_cap: LaunchCap | None = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._prev: MetricsSample | None = None
        self._rate_ivs: deque[_Interval] = deque()  # intervals inside rate_window_s
        self._win = _WindowSums()  # intervals inside window_s, with running sums
        self._last_sample: MetricsSample | None = None
        self._last_row: dict[str, float | None] = {}
        self._last_gpu_row: dict[str, float | None] = {}
        self._last_gpu_t: float | None = None
        self._last_error: str | None = None
        self._last_t: float | None = None
        self._has_vllm: bool | None = None
        self._session = {"generation_tokens_total": 0.0, "prompt_tokens_total": 0.0}
        self._finish_fractions: dict[str, float] = {}
        self._preempt_increase = 0.0

    # --- producers -------------------------------------------------------------------------

    @property
    def launch_cap(self) -> LaunchCap | None:
        """The cap the server being watched was launched with (None: none)."""
        return self._launch_cap

    def set_launch_cap(self, cap: LaunchCap | None) -> None:
        """The cap vLLM 0.34 was launched with on a desktop GPU (None: none): while serving,
        free memory under its ``headroom_bytes`` raises a ``desktop_headroom`` signal."""
        with self._lock:
            self._launch_cap = cap

    def set_vllm_pids(self, pids: Iterable[int]) -> None:
        """The pids of the vLLM process tree (API server, EngineCore, workers)."""
        with self._lock:
            self._vllm_pids = frozenset(int(p) for p in pids)

    def add_vllm_sample(self, sample: MetricsSample) -> None:
        """Append one scrape; derived series use the increments since the previous one."""
        with self._lock:
            t = sample.t_monotonic_s
            self._last_t = t
            self._last_error = None
            self._has_vllm = sample.has_vllm_metrics
            if not sample.has_vllm_metrics:
                self._vllm.append(t, {})
                self._last_row = {}
                return
            prev = self._prev
            if prev is not None and t > prev.t_monotonic_s:
                iv = self._interval(prev, sample)
                self._rate_ivs.append(iv)
                self._win.push(iv)
            self._prune(t)
            row = self._derive(sample)
            self._vllm.append(t, row)
            self._prev = sample
            self._last_sample = sample
            self._last_row = row

    def add_scrape_error(self, t_monotonic_s: float, error: ScrapeError | str) -> None:
        """Record a failed scrape as a gap (NaN) at ``t_monotonic_s``."""
        with self._lock:
            self._vllm.append(t_monotonic_s, {})
            self._last_t = t_monotonic_s
            self._last_error = str(error)
            self._last_row = {}

    def add_gpu_sample(self, sample: Any) -> None:
        """Append an NVML sample (duck-typed ``GpuSample``); missing fields become NaN.

        A sample whose ``ok`` is False (GPU lost, NVML error) is recorded as a gap.
        """
        t = float(sample.t_monotonic_s)
        if getattr(sample, "ok", True) is False:
            self.add_gpu_gap(t)
            return
        used = _num(getattr(sample, "memory_used_bytes", None))
        procs = _process_bytes(sample)
        raw_mask = getattr(sample, "throttle_reasons_mask", None)
        mask = int(raw_mask) if isinstance(raw_mask, int) else None
        with self._lock:
            vllm_bytes: float | None = None
            if procs is not None and self._vllm_pids:
                vllm_bytes = _tree_bytes(procs, self._vllm_pids)
            other = used - vllm_bytes if used is not None and vllm_bytes is not None else None
            row = {
                "memory_used_bytes": used,
                "memory_total_bytes": _num(getattr(sample, "memory_total_bytes", None)),
                "vllm_memory_bytes": vllm_bytes,
                "other_memory_bytes": other,
                "gpu_util_percent": _num(getattr(sample, "gpu_util_percent", None)),
                "power_w": _num(getattr(sample, "power_w", None)),
                "power_limit_w": _num(getattr(sample, "power_limit_w", None)),
                "temperature_c": _num(getattr(sample, "temperature_c", None)),
                "sm_clock_mhz": _num(getattr(sample, "sm_clock_mhz", None)),
                "throttle_reasons_mask": None if mask is None else float(mask),
                "throttled": None if mask is None else float(is_throttled(mask)),
            }
            self._gpu.append(t, row)
            self._last_gpu_row = row
            self._last_gpu_t = t

    def add_gpu_gap(self, t_monotonic_s: float) -> None:
        """Record a failed NVML read as a gap."""
        with self._lock:
            self._gpu.append(t_monotonic_s, {})
            self._last_gpu_row = {}
            self._last_gpu_t = t_monotonic_s

    def clear(self) -> None:
        """Forget everything (a new session)."""
        with self._lock:
            self._vllm.clear()
            self._gpu.clear()
            self._reset_state()

    # --- derivation (lock held) ------------------------------------------------------------

    def _interval(self, prev: MetricsSample, cur: MetricsSample) -> _Interval:
        counters = {
            name: _increase(getattr(cur, name), getattr(prev, name)) for name in _COUNTER_FIELDS
        }
        for name in ("generation_tokens_total", "prompt_tokens_total"):
            self._session[name] += counters[name]
        success = {
            reason: _increase(value, prev.request_success_by_reason.get(reason))
            for reason, value in cur.request_success_by_reason.items()
        }
        hists = {h: _hist_increase(getattr(cur, h), getattr(prev, h)) for h in _HISTS}
        return _Interval(prev.t_monotonic_s, cur.t_monotonic_s, counters, success, hists)

    def _prune(self, now: float) -> None:
        while self._rate_ivs and self._rate_ivs[0].t_end <= now - self.config.rate_window_s:
            self._rate_ivs.popleft()
        self._win.prune(now - self.config.window_s)

    def _derive(self, s: MetricsSample) -> dict[str, float | None]:
        now = s.t_monotonic_s
        row: dict[str, float | None] = {
            "running": s.running,
            "waiting": s.waiting,
            "kv_usage_frac": s.kv_usage_frac,
        }
        if self._rate_ivs:
            span = now - self._rate_ivs[0].t_start
            for series, counter in (
                ("generation_tokens_per_s", "generation_tokens_total"),
                ("prompt_tokens_per_s", "prompt_tokens_total"),
            ):
                if getattr(s, counter) is not None:
                    row[series] = sum(iv.counters[counter] for iv in self._rate_ivs) / span
        win = self._win
        self._finish_fractions = {}
        self._preempt_increase = 0.0
        if not win.intervals:
            return row
        span = now - win.intervals[0].t_start
        if s.preemptions_total is not None:
            self._preempt_increase = win.counters["preemptions_total"]
            row["preemptions_per_min"] = self._preempt_increase / span * 60.0
        queries = win.counters["prefix_queries_total"]
        if s.prefix_queries_total is not None and queries > 0:
            row["prefix_hit_rate"] = win.counters["prefix_hits_total"] / queries
        total = sum(win.success.values())
        if total > 0:
            self._finish_fractions = {r: n / total for r, n in win.success.items() if n > 0}
            ok = sum(n for r, n in win.success.items() if r in _OK_REASONS)
            row["success_rate"] = ok / total
        for h in _HISTS:
            snap: HistogramSnapshot | None = getattr(s, h)
            acc = win.hists.get(h)
            if snap is None or acc is None or acc.shape != (len(snap.upper_bounds),):
                continue
            counts = acc.tolist()
            for qname, q in _QUANTILES:
                value = histogram_quantile(q, snap.upper_bounds, counts)
                row[f"{h}_{qname}_s"] = None if math.isnan(value) else value
        return row

    # --- readers ---------------------------------------------------------------------------

    def series(
        self, name: str, window_s: float | None = None, *, now_s: float | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Times (monotonic s) and values of one series over the last ``window_s`` seconds.

        ``window_s=None`` returns everything kept. Values are float32 copies, NaN in gaps.

        Raises:
            KeyError: unknown series name (see :data:`SERIES`).
        """
        if name not in SERIES:
            raise KeyError(f"unknown telemetry series {name!r}; known: {', '.join(SERIES)}")
        ring = self._vllm if name in VLLM_SERIES else self._gpu
        with self._lock:
            if window_s is None:
                t0 = -math.inf
            else:
                t0 = (self._clock() if now_s is None else now_s) - window_s
            return ring.window(name, t0)

    def latest(self) -> TelemetrySummary:
        """A snapshot of the newest values, status and pressure signals."""
        with self._lock:
            values: dict[str, float | None] = dict.fromkeys(SERIES)
            values.update(self._last_row)
            values.update(self._last_gpu_row)
            status = None
            if self._has_vllm is False:
                status = DISABLED_STATS_MESSAGE
            elif self._last_error is not None:
                status = f"no metrics: {self._last_error}"
            sample = self._last_sample
            return TelemetrySummary(
                t_monotonic_s=self._last_t,
                has_vllm_metrics=self._has_vllm,
                status_message=status,
                last_scrape_error=self._last_error,
                values=values,
                finish_reason_fractions=dict(self._finish_fractions),
                generation_tokens_session=self._session["generation_tokens_total"],
                prompt_tokens_session=self._session["prompt_tokens_total"],
                cache_config=dict(sample.cache_config) if sample else {},
                model_name=sample.model_name if sample else None,
                pressure=tuple(self._pressure(values)),
            )

    def _pressure(self, v: Mapping[str, float | None]) -> list[PressureSignal]:
        cfg = self.config
        out: list[PressureSignal] = []
        kv, waiting = v.get("kv_usage_frac"), v.get("waiting")
        if kv is not None and waiting is not None and kv > cfg.kv_full_frac and waiting > 0:
            out.append(
                PressureSignal(
                    "kv_full",
                    f"KV cache {kv:.0%} full with {waiting:.0f} request(s) waiting",
                    "lower --max-num-seqs, use --kv-cache-dtype fp8, or shorten --max-model-len",
                    kv,
                )
            )
        if self._preempt_increase > 0:
            # vLLM 0.34 reports an unset utilization as "None" (1.0 with the extensible KV
            # cache): there is nothing to raise then
            label = self._last_sample.cache_config.get("gpu_memory_utilization") \
                if self._last_sample is not None else None
            at_full = label in ("None", "1", "1.0")
            out.append(
                PressureSignal(
                    "preemptions",
                    f"{self._preempt_increase:.0f} preemption(s) in the last {cfg.window_s:.0f} s: "
                    "requests are evicted and recomputed",
                    "lower --max-num-seqs or use --kv-cache-dtype fp8"
                    if at_full else "lower --max-num-seqs, use --kv-cache-dtype fp8, or raise "
                    "--gpu-memory-utilization",
                    self._preempt_increase,
                )
            )
        ttft = v.get("ttft_p99_s")
        if ttft is not None and ttft > cfg.ttft_goal_s and self._last_gpu_t is not None:
            util = self._gpu_window_mean("gpu_util_percent")
            if util is not None and util < cfg.gpu_idle_percent:
                out.append(
                    PressureSignal(
                        "cpu_bound",
                        f"TTFT P99 {ttft:.2f} s is over the {cfg.ttft_goal_s:g} s goal while "
                        f"the GPU is {util:.0f} % busy: the CPU side (tokenizer, API server) "
                        "is the bottleneck",
                        "raise --api-server-count, send shorter prompts, or free CPU cores",
                        ttft,
                    )
                )
        used, total = v.get("memory_used_bytes"), v.get("memory_total_bytes")
        cap = self._launch_cap
        if cap is not None and used is not None and total:
            warning = headroom_warning(int(total - used), cap)
            if warning is not None:
                out.append(PressureSignal(
                    "desktop_headroom", warning,
                    "close GPU programs, or relaunch with a lower --gpu-memory-utilization",
                    total - used))
        if used is not None and total and used / total > cfg.vram_full_frac:
            growth = self._gpu_window_growth("other_memory_bytes")
            if growth is not None and growth > cfg.other_growth_bytes:
                out.append(
                    PressureSignal(
                        "vram_full",
                        f"VRAM {used / total:.0%} used and other programs grew by "
                        f"{growth / 1024**2:.0f} MiB in {cfg.window_s:.0f} s",
                        "lower --gpu-memory-utilization or close the other GPU programs",
                        used / total,
                    )
                )
        return out

    def _gpu_window(self, name: str) -> np.ndarray:
        assert self._last_gpu_t is not None
        _, y = self._gpu.window(name, self._last_gpu_t - self.config.window_s)
        return y[np.isfinite(y)]

    def _gpu_window_mean(self, name: str) -> float | None:
        y = self._gpu_window(name)
        return float(y.mean()) if y.size else None

    def _gpu_window_growth(self, name: str) -> float | None:
        y = self._gpu_window(name)
        return float(y[-1]) - float(y.min()) if y.size >= 2 else None

    # --- export ----------------------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        """Bytes reserved for the ring buffers (fixed at construction; resident only as far as
        rows have been written)."""
        return self._vllm.nbytes + self._gpu.nbytes

    def _snapshot(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        with self._lock:
            return {"vllm": self._vllm.all_rows(), "gpu": self._gpu.all_rows()}

    def to_dict(self) -> dict[str, Any]:
        """All kept series as plain lists (NaN -> None), with units and the wall-clock offset."""
        snap = self._snapshot()
        out: dict[str, Any] = {
            "format": "kvpilot-telemetry",
            "version": 1,
            "wall_offset_s": self.wall_offset_s,
            "series": {},
        }
        for source, names in (("vllm", VLLM_SERIES), ("gpu", GPU_SERIES)):
            t, y = snap[source]
            for i, (name, unit) in enumerate(names.items()):
                out["series"][name] = {
                    "unit": unit,
                    "t_monotonic_s": t.tolist(),
                    "y": [None if math.isnan(x) else x for x in y[i].tolist()],
                }
        return out

    def export_json(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON to ``path``."""
        data = self.to_dict()
        with Path(path).open("w", encoding="utf-8") as fh:
            json.dump(data, fh, allow_nan=False)

    def export_csv(self, path: str | Path) -> None:
        """Write one row per sample, both sources merged by time; empty cells for NaN.

        Columns: ``t_monotonic_s``, ``t_unix_s``, ``source`` (vllm|gpu), then every series.
        """
        snap = self._snapshot()
        rows: list[tuple[float, str, dict[str, float]]] = []
        for source, names in (("vllm", VLLM_SERIES), ("gpu", GPU_SERIES)):
            t, y = snap[source]
            keys = list(names)
            for j in range(t.shape[0]):
                rows.append((float(t[j]), source, {k: float(y[i, j]) for i, k in enumerate(keys)}))
        rows.sort(key=lambda r: r[0])
        with Path(path).open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["t_monotonic_s", "t_unix_s", "source", *SERIES])
            for t_row, source, vals in rows:
                cells = [_cell(vals.get(k, math.nan)) for k in SERIES]
                writer.writerow([repr(t_row), repr(t_row + self.wall_offset_s), source, *cells])


def _cell(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.9g}"
