"""Live readings of one GPU from a background thread: :class:`GpuSampler` -> :class:`GpuSample`.

Each tick makes one pass over NVML (memory, utilization, temperature, power, clocks, per-process
memory) and publishes a frozen :class:`GpuSample`. The thread never raises: a lost GPU gives
samples with ``lost=True``, NVML trouble gives samples with ``error`` set, and the thread keeps
ticking (retrying NVML start-up every :data:`REINIT_INTERVAL_S`) until :meth:`GpuSampler.stop`.
Callers never block on NVML: :meth:`GpuSampler.latest` and :meth:`GpuSampler.history` only read
what the thread already stored.
"""

from __future__ import annotations

import collections
import functools
import logging
import operator
import threading
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kvpilot.core.base.background import BackgroundLoop, notify
from kvpilot.core.base.errors import HardwareError
from kvpilot.core.hardware.nvml import GpuLostError, Nvml, NvmlInitError
from kvpilot.core.hardware.probe import read_dynamic, read_memory, running_processes
from kvpilot.core.hardware.problems import HardwareProblem, ProblemKind

log = logging.getLogger("kvpilot.hardware")

#: sampling rates accepted, in Hz
MIN_RATE_HZ = 0.1
MAX_RATE_HZ = 10.0
#: how often a failed NVML start-up is retried while sampling, in seconds
REINIT_INTERVAL_S = 5.0

_EMPTY: Mapping[int, int | None] = types.MappingProxyType({})
_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class GpuSample:
    """One reading of one GPU. None: not reported (or not read because of ``error``/``lost``).

    ``process_used_bytes`` maps pid -> bytes (None: the driver does not report it, as on WSL2).
    ``throttle_reasons_mask`` holds NVML's clock-event reason bits (see
    :mod:`kvpilot.core.base.throttle`), ``energy_mj`` the GPU's energy counter in
    millijoules since the driver loaded. ``read_s`` is how long the NVML pass took.
    """

    t_monotonic_s: float
    gpu_index: int
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    gpu_util_percent: int | None = None
    mem_util_percent: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons_mask: int | None = None
    energy_mj: int | None = None
    process_used_bytes: Mapping[int, int | None] = field(default_factory=lambda: _EMPTY)
    lost: bool = False
    error: str | None = None
    problem: HardwareProblem | None = None
    read_s: float = 0.0
    #: every GPU this sample covers (empty: just ``gpu_index``); see :func:`combine_samples`
    gpu_indices: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        """True when the reading succeeded."""
        return not self.lost and self.error is None


def _check_rate(rate_hz: float) -> float:
    if not MIN_RATE_HZ <= rate_hz <= MAX_RATE_HZ:
        raise ValueError(
            f"GPU sampling rate must be between {MIN_RATE_HZ} and {MAX_RATE_HZ} Hz, got {rate_hz}"
        )
    return float(rate_hz)


class GpuSampler(BackgroundLoop):
    """Samples GPU ``index`` at ``rate_hz`` in a daemon thread.

    Args:
        index: NVML index of the GPU.
        rate_hz: samples per second, 0.1 to 10 (2 by default).
        nvml_module: the NVML module (default: ``$KVPILOT_FAKE_NVML`` replay or ``pynvml``).
        on_sample: called in the sampler thread with each new sample; its exceptions are
            logged and ignored. A GUI adapter forwards it through a queued signal.
        history_len: how many samples :meth:`history` keeps.

    Raises:
        ValueError: ``rate_hz`` out of range or ``history_len`` < 1.
    """

    def __init__(
        self,
        index: int = 0,
        rate_hz: float = 2.0,
        nvml_module: object | None = None,
        on_sample: Callable[[GpuSample], None] | None = None,
        history_len: int = 1200,
    ) -> None:
        if history_len < 1:
            raise ValueError(f"history_len must be at least 1, got {history_len}")
        self.index = index
        self._rate_hz = _check_rate(rate_hz)
        self._module_arg = nvml_module
        self._on_sample = on_sample
        self._lock = threading.Lock()
        self._history: collections.deque[GpuSample] = collections.deque(maxlen=history_len)
        self._latest: GpuSample | None = None
        super().__init__(f"kvpilot-gpu{index}-sampler")  # set_rate() wakes it too
        self._nv: Nvml | None = None
        self._handle: Any = None
        self._next_init_s = 0.0
        self._init_problem: HardwareProblem | None = None

    # ---------------------------------------------------------------- control
    @property
    def rate_hz(self) -> float:
        """Current sampling rate in Hz."""
        return self._rate_hz

    def set_rate(self, rate_hz: float) -> None:
        """Change the rate; a running sampler takes a sample now and continues at the new rate.

        Raises:
            ValueError: ``rate_hz`` outside 0.1-10 Hz.
        """
        self._rate_hz = _check_rate(rate_hz)
        self._wake.set()

    # ---------------------------------------------------------------- results
    def latest(self) -> GpuSample | None:
        """The newest sample, or None before the first tick."""
        with self._lock:
            return self._latest

    def history(self) -> tuple[GpuSample, ...]:
        """Stored samples, oldest first (at most ``history_len``)."""
        with self._lock:
            return tuple(self._history)

    # ---------------------------------------------------------------- work
    def sample_once(self) -> GpuSample:
        """Take one sample now in the calling thread (the thread's tick). Never raises."""
        started = time.monotonic()
        try:
            sample = self._read(started)
        except Exception as exc:  # the sampler must survive anything
            log.exception("GPU sampler tick failed")
            sample = GpuSample(t_monotonic_s=started, gpu_index=self.index, error=repr(exc))
        self._publish(sample)
        return sample

    def close(self) -> None:
        """Close the NVML session (the thread does this itself when it stops)."""
        if self._nv is not None:
            self._nv.close()
        self._nv = None
        self._handle = None

    def _publish(self, sample: GpuSample) -> None:
        with self._lock:
            self._latest = sample
            self._history.append(sample)
        if self._on_sample is not None:
            notify(log, "GPU sample listener", self._on_sample, sample)

    def _ensure_open(self, now: float) -> HardwareProblem | None:
        if self._handle is not None:
            return None
        if now < self._next_init_s and self._init_problem is not None:
            return self._init_problem
        self._next_init_s = now + REINIT_INTERVAL_S
        try:
            nv = Nvml(self._module_arg) if self._nv is None else self._nv
            self._nv = nv
            nv.open()
            count = nv.device_count()
            if self.index >= count:
                raise NvmlInitError(
                    HardwareProblem.of(
                        ProblemKind.NO_DEVICES, f"GPU {self.index} asked, {count} present"
                    )
                )
            self._handle = nv.handle(self.index)
        except NvmlInitError as exc:
            self.close()
            self._init_problem = exc.problem
            return exc.problem
        except GpuLostError as exc:
            self.close()
            self._init_problem = exc.problem
            return exc.problem
        except HardwareError as exc:  # a bad $KVPILOT_FAKE_NVML
            self.close()
            self._init_problem = HardwareProblem.of(ProblemKind.UNKNOWN, exc.message)
            return self._init_problem
        self._init_problem = None
        return None

    def _read(self, started: float) -> GpuSample:
        problem = self._ensure_open(started)
        if problem is not None:
            return GpuSample(
                t_monotonic_s=started,
                gpu_index=self.index,
                lost=problem.kind is ProblemKind.GPU_LOST,
                error=problem.one_line(),
                problem=problem,
            )
        nv, handle = self._nv, self._handle
        assert nv is not None
        try:
            values: dict[str, Any] = {}
            values.update(read_memory(nv, handle))
            values.update(read_dynamic(nv, handle))
            values["process_used_bytes"] = types.MappingProxyType(_process_memory(nv, handle))
        except (GpuLostError, NvmlInitError) as exc:
            # lost GPU or driver gone: reopen NVML every REINIT_INTERVAL_S (a reset GPU or a
            # reloaded driver is sampled again without restarting the app)
            self.close()
            self._init_problem = exc.problem
            self._next_init_s = started + REINIT_INTERVAL_S
            if not isinstance(exc, GpuLostError):
                log.warning("NVML stopped answering (%s); retrying", exc.problem.one_line())
            return GpuSample(
                t_monotonic_s=started,
                gpu_index=self.index,
                lost=isinstance(exc, GpuLostError),
                error=exc.problem.one_line(),
                problem=exc.problem,
                read_s=time.monotonic() - started,
            )
        return GpuSample(
            t_monotonic_s=started,
            gpu_index=self.index,
            read_s=time.monotonic() - started,
            **values,
        )

    def _run(self) -> None:
        next_tick = time.monotonic()
        try:
            while not self._stop.is_set():
                self.sample_once()
                period = 1.0 / self._rate_hz
                next_tick += period
                now = time.monotonic()
                if next_tick < now:  # fell behind (suspend, slow driver): do not burst
                    next_tick = now + period
                if self._wake.wait(next_tick - now):  # rate changed or stopping
                    self._wake.clear()
                    next_tick = time.monotonic()
        finally:
            self.close()


def _process_memory(nv: Nvml, handle: object) -> dict[int, int | None]:
    """pid -> used bytes (None: not reported) over compute and graphics processes."""
    out: dict[int, int | None] = {}
    for kind in ("compute", "graphics"):
        for entry in running_processes(nv, handle, kind):
            used = entry.usedGpuMemory
            prev = out.get(int(entry.pid))
            if used is None:
                out.setdefault(int(entry.pid), None)
            else:
                out[int(entry.pid)] = int(used) if prev is None else max(prev, int(used))
    return out


def _sum(values: list[_N | None]) -> _N | None:
    known = [v for v in values if v is not None]
    return sum(known) if values and len(known) == len(values) else None


def combine_samples(samples: list[GpuSample]) -> GpuSample:
    """One sample for several GPUs serving one model: memory, power draw, power limit and energy
    summed, utilization and clocks averaged, the hottest temperature, the throttle masks OR-ed
    (None only when no GPU reports one), per-process memory merged (summed per pid).
    Lost or failed when any part is. ``gpu_index`` is the first GPU's.

    Raises:
        ValueError: ``samples`` is empty.
    """
    if not samples:
        raise ValueError("combine_samples needs at least one sample")
    if len(samples) == 1:
        return samples[0]
    first = samples[0]
    bad = next((s for s in samples if not s.ok), None)
    indices = tuple(s.gpu_index for s in samples)
    if bad is not None:
        return GpuSample(
            t_monotonic_s=first.t_monotonic_s, gpu_index=first.gpu_index, lost=bad.lost,
            error=f"GPU {bad.gpu_index}: {bad.error}", problem=bad.problem,
            read_s=sum(s.read_s for s in samples), gpu_indices=indices,
        )

    def mean(name: str) -> int | None:
        values = [getattr(s, name) for s in samples]
        if any(v is None for v in values):
            return None
        return round(sum(values) / len(values))

    procs: dict[int, int | None] = {}
    for s in samples:
        for pid, used in s.process_used_bytes.items():
            prev = procs.get(pid)
            procs[pid] = used if prev is None else (prev if used is None else prev + used)
    temps = [s.temperature_c for s in samples]
    masks = [s.throttle_reasons_mask for s in samples if s.throttle_reasons_mask is not None]
    return GpuSample(
        t_monotonic_s=first.t_monotonic_s,
        gpu_index=first.gpu_index,
        memory_used_bytes=_sum([s.memory_used_bytes for s in samples]),
        memory_total_bytes=_sum([s.memory_total_bytes for s in samples]),
        memory_free_bytes=_sum([s.memory_free_bytes for s in samples]),
        memory_reserved_bytes=_sum([s.memory_reserved_bytes for s in samples]),
        gpu_util_percent=mean("gpu_util_percent"),
        mem_util_percent=mean("mem_util_percent"),
        power_w=_sum([s.power_w for s in samples]),
        power_limit_w=_sum([s.power_limit_w for s in samples]),
        temperature_c=None if any(t is None for t in temps) else max(t or 0 for t in temps),
        sm_clock_mhz=mean("sm_clock_mhz"),
        mem_clock_mhz=mean("mem_clock_mhz"),
        throttle_reasons_mask=functools.reduce(operator.or_, masks) if masks else None,
        energy_mj=_sum([s.energy_mj for s in samples]),
        process_used_bytes=types.MappingProxyType(procs),
        read_s=sum(s.read_s for s in samples),
        gpu_indices=indices,
    )


class GpuSetSampler(GpuSampler):
    """Samples exactly the GPUs ``indices`` (one NVML pass each per tick) and publishes their
    :func:`combine_samples`: the telemetry of a tensor-parallel server.

    Raises:
        ValueError: no index, a repeated index, or a rate out of range.
    """

    def __init__(
        self,
        indices: tuple[int, ...],
        rate_hz: float = 2.0,
        nvml_module: object | None = None,
        on_sample: Callable[[GpuSample], None] | None = None,
        history_len: int = 1200,
    ) -> None:
        if not indices or len(set(indices)) != len(indices):
            raise ValueError(f"GPU indices must be distinct and non-empty, got {indices!r}")
        super().__init__(indices[0], rate_hz, nvml_module, on_sample, history_len)
        self.indices = tuple(indices)
        self._parts = [GpuSampler(i, rate_hz, nvml_module, None, 1) for i in self.indices]

    def sample_once(self) -> GpuSample:
        """One pass over every GPU of the set, combined. Never raises."""
        started = time.monotonic()
        try:
            sample = combine_samples([p.sample_once() for p in self._parts])
        except Exception as exc:  # the sampler must survive anything
            log.exception("GPU set sampler tick failed")
            sample = GpuSample(t_monotonic_s=started, gpu_index=self.index, error=repr(exc),
                               gpu_indices=self.indices)
        self._publish(sample)
        return sample

    def close(self) -> None:
        """Close every GPU's NVML session."""
        for part in self._parts:
            part.close()
        super().close()



def start_run_sampler(
    window_s: float,
    *,
    index: int = 0,
    rate_hz: float = MAX_RATE_HZ,
    nvml_module: object | None = None,
) -> GpuSampler | None:
    """A running sampler of GPU ``index`` that keeps at least ``window_s`` seconds of samples
    (a load test's level), or None when that GPU cannot be read here (no driver, no GPU).

    The caller stops it. ``rate_hz`` defaults to the highest rate, 10 Hz.

    Raises:
        ValueError: ``rate_hz`` out of range or ``window_s`` not positive.
    """
    if not window_s > 0:
        raise ValueError(f"window_s must be > 0, got {window_s}")
    sampler = GpuSampler(
        index, rate_hz, nvml_module, history_len=int(window_s * rate_hz) + 10
    )
    if not sampler.sample_once().ok:
        sampler.close()
        return None
    sampler.start()
    return sampler
