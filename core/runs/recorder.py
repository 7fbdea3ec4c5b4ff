"""Keeps the record of one server run as its supervisor reports it.

A :class:`RunRecorder` is the supervisor's second listener (the launch session chains it after
the face's own, :meth:`kvpilot.core.app.launch.LaunchSession.supervisor`): the record is written
when the launch starts, when vLLM reports its capacity, and when the run ends, with how it ended
and a downsampled summary of the telemetry (:func:`telemetry_summary`) when the face keeps one.
Nothing here may break supervision: a write that fails (a full disk) is logged and skipped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from kvpilot.core.base.plan import settings_dict
from kvpilot.core.runs.record import (
    CAPACITY_FIELDS,
    FAILED,
    STOPPED,
    RunRecord,
    SeriesSummary,
    capacity_dict,
)
from kvpilot.core.runs.store import RunStore, new_run_id, utc_now

if TYPE_CHECKING:
    from kvpilot.core.base.failures import Failure
    from kvpilot.core.base.plan import Capacity
    from kvpilot.core.fit.measurements import ReportedCapacity
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.telemetry.live import Telemetry
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.supervisor import Supervisor, SupervisorEvent

log = logging.getLogger("kvpilot.runs")

#: the telemetry series a record keeps (downsampled)
SUMMARY_SERIES = (
    "generation_tokens_per_s", "running", "waiting", "kv_usage_frac", "ttft_p99_s",
    "tpot_p99_s", "memory_used_bytes", "power_w", "temperature_c", "sm_clock_mhz", "throttled",
)
#: points kept of each series
SUMMARY_POINTS = 120


def _num(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def downsample(t: np.ndarray, y: np.ndarray, points: int = SUMMARY_POINTS
               ) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    """At most ``points`` bins over the time span of ``t``: each bin's mid-time (seconds since
    the first sample) and the mean of its finite values (None: a gap)."""
    if t.size == 0:
        return (), ()
    t0, t1 = float(t[0]), float(t[-1])
    if t.size <= points or t1 <= t0:
        return (tuple(float(x - t0) for x in t),
                tuple(_num(float(v)) for v in y))
    edges = np.linspace(t0, t1, points + 1)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    ts: list[float] = []
    ys: list[float | None] = []
    for b in range(points):
        vals = y[which == b]
        vals = vals[np.isfinite(vals)]
        ts.append(float((edges[b] + edges[b + 1]) / 2 - t0))
        ys.append(float(vals.mean()) if vals.size else None)
    return tuple(ts), tuple(ys)


def telemetry_summary(
    telemetry: Telemetry, points: int = SUMMARY_POINTS
) -> dict[str, SeriesSummary]:
    """The run's telemetry (a :class:`~kvpilot.core.telemetry.live.Telemetry`) as
    :data:`SUMMARY_SERIES`, each downsampled to ``points`` with its mean, min and max; series
    without a finite value are left out."""
    from kvpilot.core.telemetry.live import SERIES

    out: dict[str, SeriesSummary] = {}
    for name in SUMMARY_SERIES:
        t, y = telemetry.series(name)
        y = np.asarray(y, dtype=float)
        finite = y[np.isfinite(y)]
        if finite.size == 0:
            continue
        ts, ys = downsample(np.asarray(t, dtype=float), y, points)
        out[name] = SeriesSummary(
            unit=SERIES[name], mean=float(finite.mean()), min=float(finite.min()),
            max=float(finite.max()), t_s=ts, y=ys,
        )
    return out


class RunRecorder:
    """The record of one launch (see the module docstring).

    Args:
        store: where the record goes.
        spec: what is launched.
        runtime: the vLLM that runs it.
        predicted: the plan's capacity (None without a plan).
        profile: the settings profile launched (None: the command line's flags).
        source: ``cli`` or ``gui``.
        telemetry: returns the face's telemetry at the end of the run (None: none kept).
        note: what led to this launch (a fallback's description), "" for the first.
    """

    def __init__(
        self,
        store: RunStore,
        spec: LaunchSpec,
        runtime: VllmRuntime | None,
        *,
        predicted: Capacity | None = None,
        profile: str | None = None,
        source: str = "cli",
        telemetry: Callable[[], Telemetry | None] | None = None,
        note: str = "",
    ) -> None:
        self.store = store
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._sup: Supervisor | None = None
        self._done = False
        self.record = RunRecord(
            id=new_run_id(), started_at=utc_now(), model=spec.model, profile=profile,
            source=source, served_model_name=spec.served_model_name or "",
            owner_pid=os.getpid(),
            runtime_version=getattr(runtime, "version", "") or "",
            runtime_path=" ".join(getattr(runtime, "argv_prefix", ()) or ()),
            settings=settings_dict(spec), extra_args=tuple(spec.extra_args),
            predicted=capacity_dict(predicted, CAPACITY_FIELDS) if predicted else {},
            fallbacks=(note,) if note else (),
        )

    def attach(self, sup: Supervisor) -> None:
        """The supervisor whose run this is (read for pid, URL, capacity, failure)."""
        self._sup = sup

    # ------------------------------------------------------------------ the listener

    def on_event(self, ev: SupervisorEvent) -> None:
        """The supervisor's listener: never raises."""
        from kvpilot.core.vllm.supervisor import READY, CapacityUpdatedEvent, StateEvent

        try:
            if isinstance(ev, StateEvent):
                if ev.state in (STOPPED, FAILED):
                    self._finish(ev.state, ev.failure)
                else:
                    self._update(startup=ev.state == READY)
            elif isinstance(ev, CapacityUpdatedEvent):
                self._update(capacity=ev.capacity)
        except Exception:  # never let bookkeeping break supervision
            log.exception("could not keep the run record")

    def add_swap(self, swap: Mapping[str, Any]) -> None:
        """Add a front's swap (why this server was started or woken, the wait, the load time)
        to the record and write it; never raises."""
        try:
            with self._lock:
                rec = replace(self.record, swaps=(*self.record.swaps, dict(swap)))
                self.record = rec
                self._write(rec)
        except Exception:  # never let bookkeeping break serving
            log.exception("could not keep the swap in the run record")

    def _current(self, capacity: ReportedCapacity | None = None) -> RunRecord:
        rec = self.record
        sup = self._sup
        if sup is None:
            return rec
        values: dict[str, Any] = {}
        if sup.pid is not None:
            values["vllm_pid"] = sup.pid
        with contextlib.suppress(Exception):  # a supervisor without a command yet
            values["base_url"] = sup.base_url
        reported = capacity if capacity is not None else sup.capacity
        if not reported.empty:
            values["reported"] = capacity_dict(reported, CAPACITY_FIELDS)
        return replace(rec, **values)

    def _update(
        self, *, capacity: ReportedCapacity | None = None, startup: bool = False
    ) -> None:
        with self._lock:
            if self._done:
                return
            rec = self._current(capacity)
            if startup and self._sup is not None:
                started = self._sup.started_monotonic_s
                ready = self._sup.ready_monotonic_s
                if started is not None and ready is not None:
                    rec = replace(rec, startup_s=round(ready - started, 3))
            self.record = rec
            self._write(rec)

    def _finish(self, state: str, failure: Failure | None) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            rec = self._current()
            summary: Mapping[str, SeriesSummary] = {}
            if self._telemetry is not None:
                telemetry = self._telemetry()
                if telemetry is not None:
                    summary = telemetry_summary(telemetry)
            rec = replace(
                self._merge_disk(rec), state=state, ended_at=utc_now(), telemetry=summary,
                failure_kind=failure.kind if failure is not None else None,
                failure_message=failure.message if failure is not None else None,
            )
            self.record = rec
            self._write(rec)
        self.store.prune()

    def _merge_disk(self, rec: RunRecord) -> RunRecord:
        """Load tests another process (``kvpilot bench``) added to the file meanwhile."""
        try:
            on_disk = self.store.read(rec.id)
        except Exception:  # noqa: BLE001 - not written yet, or damaged: keep ours
            return rec
        if len(on_disk.load_tests) > len(rec.load_tests):
            return replace(rec, load_tests=on_disk.load_tests)
        return rec

    def _write(self, rec: RunRecord) -> None:
        rec = self._merge_disk(rec)  # a load test may have been added to the file meanwhile
        self.record = rec
        try:
            self.store.write(rec)
        except OSError as exc:
            log.warning("the run record %s was not written: %s", rec.id, exc)
