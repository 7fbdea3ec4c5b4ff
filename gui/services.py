"""The GUI's single seam to the core: every call into hardware, fit, models and vLLM is here.

Panels never import core modules that do I/O; the main window asks :class:`AppServices`, which
runs blocking work on the thread pool (:func:`~kvpilot.gui.workers.run_in_pool`) or in the core's
own threads (samplers, supervisor), and hands results back through
:class:`~kvpilot.gui.bridge.CoreBridge` signals. When a core API changes, this module is the one
place to adapt.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from kvpilot.core.app.settings import Profile
from kvpilot.core.base import paths
from kvpilot.core.base.plan import USE_CASE_LABELS
from kvpilot.core.base.words import counted
from kvpilot.core.telemetry.live import Telemetry
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest, PlanResult, PlanRow

if TYPE_CHECKING:
    from kvpilot.core.app.heap import HeapReleaser
    from kvpilot.core.app.launch import FallbackStep, LaunchSession
    from kvpilot.core.app.watch import WatchSample
    from kvpilot.core.base.background import BackgroundLoop
    from kvpilot.core.base.failures import Failure
    from kvpilot.core.base.model_spec import ModelSpec
    from kvpilot.core.base.plan import Capacity, PlanInputs, ServingSettings
    from kvpilot.core.fit.measurements import Measured, MeasurementKey, MeasurementStore
    from kvpilot.core.hardware.probe import ProbeResult
    from kvpilot.core.hardware.proctree import StopReport
    from kvpilot.core.hardware.sampler import GpuSample, GpuSampler
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.runtimes.installer import RuntimeInstaller
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.metrics import (
        MetricsSample,
        MetricsSampler,
        MetricsScraper,
        ScrapeError,
    )
    from kvpilot.core.vllm.orphans import OrphanServer
    from kvpilot.core.vllm.supervisor import LogLineEvent, Supervisor, SupervisorEvent

log = logging.getLogger("kvpilot.gui")

#: seconds a "Measure on this GPU" dry run may take before it is given up
MEASURE_TIMEOUT_S = 900.0

#: output lines kept for the GUI between two batches (the rest of a flood is in the log file);
#: 500 every 100 ms fill the view's 5,000 lines in a second, and appending them takes a few ms
#: (2,000 took 30-120 ms on a busy machine)
LOG_BATCH_LINES = 500


def _quant_label(method: str | None, bits: int) -> str:
    return f"{method} {bits}-bit" if method else f"{bits}-bit"


#: a recorded NVML replay or the pynvml module: handed to the core untouched
NvmlModule = object


class SupervisorOptions(TypedDict, total=False):
    """Keyword arguments passed through to :class:`~kvpilot.core.vllm.supervisor.Supervisor`
    (timeouts; tests with a stand-in vllm)."""

    health_interval_s: float
    ready_health_interval_s: float
    ready_timeout_s: float | None
    measurements: tuple[MeasurementStore, MeasurementKey] | None
    buffer_lines: int
    keep_launches: int
    log_max_bytes: int
    settle_s: float
    check_flags: bool
    exit_grace_s: float
    hung_after_s: float


class InstallerOptions(TypedDict, total=False):
    """Keyword arguments passed through to the managed-runtime installer (tests: wheel
    folders, no index)."""

    installer: str
    index_url: str | None
    no_index: bool
    find_links: list[str]
    python: str | None
    check_gpu: bool
    network_timeout_s: float
    torch_index_url: str


@dataclass
class LaunchRequest:
    """What to launch: plan inputs, the model reference vLLM gets, and the profile.

    ``predicted`` is the plan's capacity (set at launch); ``overrides`` replace
    :class:`~kvpilot.core.vllm.command.LaunchSpec` fields (the GPUs, extra arguments).
    """

    inputs: PlanInputs
    model: str
    profile: Profile
    predicted: Capacity | None = None
    overrides: dict[str, object] = field(default_factory=dict)


#: planner-mode pairs offered after the single cards (spec-table names)
PLANNER_PAIRS = (
    "NVIDIA GeForce RTX 4090",
    "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 5090",
)
PLANNER_MIXED = (("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"),)


class AppServices:
    """Owns the core objects of one app session and adapts them for the GUI.

    Args:
        bridge: the signal bridge (GUI thread).
        fake_gpu: a recorded NVML snapshot name (``rtx4090-desktop``) or path, or None for the
            real NVML.
        data_dir: logs, pidfiles and measurements (default
            :func:`kvpilot.core.base.paths.data_dir`).
        nvml_module: an NVML module object to use directly (tests).
    """

    def __init__(
        self,
        bridge: CoreBridge,
        *,
        fake_gpu: str | None = None,
        data_dir: Path | None = None,
        nvml_module: NvmlModule | None = None,
    ) -> None:
        self.bridge = bridge
        self.fake_gpu = fake_gpu
        self.data_dir = data_dir or paths.data_dir()
        self._nvml_module = nvml_module
        self.telemetry = Telemetry()
        self.gpu_sampler: GpuSampler | None = None
        #: gives the memory malloc keeps after frees back to the system, once a minute
        self.heap_releaser: HeapReleaser | None = None
        self.metrics_sampler: MetricsSampler | None = None
        self._metrics_scraper: MetricsScraper | None = None
        self.supervisor: Supervisor | None = None
        self.runtime: VllmRuntime | None = None
        self.runtime_error: str | None = None
        self._lock = threading.Lock()
        #: set to cancel a model download that runs before a launch
        self.download_cancel = threading.Event()
        self._downloading = False
        #: applied to a plan's PlanInputs when it is launched from the table (the CPU backend
        #: needs an explicit KV size); fallback relaunches keep what the fallback chose
        self.plan_overrides: dict[str, object] = {}
        #: applied to LaunchSpec before every launch (dtype, scratch env for the CPU backend)
        self.launch_overrides: dict[str, object] = {}
        #: extra keyword arguments for the Supervisor (timeouts; tests with a stand-in vllm)
        self.supervisor_options: SupervisorOptions = {}
        #: (total bytes, name) of the GPU in use, for predictions about an attached local server
        self.attach_gpu: tuple[int | None, str] = (None, "")
        #: extra keyword arguments for the managed-runtime installer (tests: wheel folders)
        self.installer_options: InstallerOptions = {}
        #: threads that finish stopping a sampler (joined by :meth:`shutdown`, never the GUI)
        self._reapers: list[threading.Thread] = []
        #: vLLM output lines not yet shown: the GUI takes them in batches (:meth:`take_log_lines`)
        #: instead of one queued signal per line, which a log flood would pile up without bound
        self._log_lines: collections.deque[LogLineEvent] = collections.deque(maxlen=LOG_BATCH_LINES)
        self._log_dropped = 0
        #: the launch session of the current server run (its fallbacks and their count)
        self.session: LaunchSession | None = None
        self._log_lock = threading.Lock()

    # ----------------------------------------------------------------- hardware

    def nvml_module(self) -> NvmlModule | None:
        """The NVML module in use (a replay for ``--fake-gpu``), None for the default."""
        if self._nvml_module is None and self.fake_gpu:
            from kvpilot.core.hardware.recorded_nvml import load_recorded

            self._nvml_module = load_recorded(self.fake_gpu)
        return self._nvml_module

    def probe(self) -> ProbeResult:
        """Blocking: one NVML pass (run on the pool). Returns a ``ProbeResult``."""
        from kvpilot.core.hardware.probe import probe

        return probe(self.nvml_module())

    @staticmethod
    def spec_names() -> list[str]:
        """GPU names from the spec table for planner mode, then common pairs of cards."""
        from kvpilot.core.hardware.specs import all_specs

        names = [s.name for s in all_specs()]
        pairs = [f"2x {n}" for n in PLANNER_PAIRS if n in names]
        mixed = [f"{a} + {b}" for a, b in PLANNER_MIXED if a in names and b in names]
        return names + pairs + mixed

    @staticmethod
    def target_from_selection(result: ProbeResult, indices: tuple[int, ...]) -> DeviceTarget:
        """The target for this machine's GPUs ``indices``: one GPU as it is, several as one
        per-GPU target (the smallest card bounds each rank) carrying their GpuSet.

        Raises:
            HardwareError: an index NVML does not report.
        """
        from kvpilot.core.hardware.target import from_probe

        return from_probe(result, indices)

    @staticmethod
    def target_from_spec(name: str) -> DeviceTarget:
        """A planner-mode target: one spec-table card, or several (``2x A``, ``A + B``), on
        this machine's platform's CUDA total.

        Raises:
            KeyError: a name the spec table does not know.
        """
        from kvpilot.core.base.errors import FitError
        from kvpilot.core.hardware.target import from_spec

        try:
            return from_spec(name)
        except FitError as exc:
            raise KeyError(name) from exc

    def start_gpu_sampler(self, index: int | tuple[int, ...], rate_hz: float) -> None:
        """Sample GPU ``index`` (or exactly the GPUs of a tuple, combined) in the core sampler
        thread; samples go to telemetry + signal."""
        from kvpilot.core.hardware.sampler import (
            MAX_RATE_HZ,
            MIN_RATE_HZ,
            GpuSampler,
            GpuSetSampler,
        )

        self.stop_gpu_sampler()
        emit = self.bridge.emitter("gpu_sample")
        telemetry = self.telemetry

        def on_sample(sample: GpuSample) -> None:
            if self.gpu_sampler is not sampler:
                return  # the last sample of a sampler being stopped in the background
            if sample.ok:
                telemetry.add_gpu_sample(sample)
            else:
                telemetry.add_gpu_gap(sample.t_monotonic_s)
            emit(sample)

        rate = min(MAX_RATE_HZ, max(MIN_RATE_HZ, rate_hz))
        indices = index if isinstance(index, tuple) else (index,)
        sampler: GpuSampler
        if len(indices) > 1:
            sampler = GpuSetSampler(
                indices, rate_hz=rate, nvml_module=self.nvml_module(), on_sample=on_sample
            )
        else:
            sampler = GpuSampler(
                indices[0], rate_hz=rate, nvml_module=self.nvml_module(), on_sample=on_sample
            )
        self.gpu_sampler = sampler
        sampler.start()

    def start_heap_releaser(self) -> None:
        """Give freed heap pages back to the system once a minute, on its own thread, for as
        long as the app runs (see :mod:`kvpilot.core.app.heap`; nothing where there is no glibc)."""
        from kvpilot.core.app.heap import HeapReleaser

        if self.heap_releaser is None:
            self.heap_releaser = HeapReleaser()
        self.heap_releaser.start()

    def stop_heap_releaser(self) -> None:
        """Stop giving freed memory back, without waiting (the thread ends in the background)."""
        releaser, self.heap_releaser = self.heap_releaser, None
        self._stop_loop(releaser, "kvpilot-stop-heap-release")

    def stop_loops(self) -> None:
        """Stop every background loop (the /metrics and GPU samplers, the heap releaser)
        without waiting; their threads end in the background (:meth:`join_background`)."""
        self.stop_metrics()
        self.stop_gpu_sampler()
        self.stop_heap_releaser()

    def stop_gpu_sampler(self) -> None:
        """Stop the GPU sampler without waiting (the thread ends in the background)."""
        sampler, self.gpu_sampler = self.gpu_sampler, None
        self._stop_loop(sampler, "kvpilot-stop-gpu-sampler")

    def _stop_loop(
        self, loop: BackgroundLoop | None, name: str, then: Callable[[], None] | None = None
    ) -> None:
        """Tell ``loop`` to stop now; wait for its thread, then run ``then``, on a reaper."""
        if loop is None:
            if then is not None:
                then()
            return
        loop.stop(timeout_s=0)

        def finish() -> None:
            loop.stop()
            if then is not None:
                then()

        self._reap(finish, name)

    def _reap(self, finish: Callable[[], None], name: str) -> None:
        """Run ``finish`` (a blocking join or close) on a short-lived thread, never the caller's.

        The GUI thread calls the ``stop_*`` methods; a sampler in the middle of a slow scrape
        or NVML call may take seconds to end, which must not freeze the window.
        """
        self._reapers = [t for t in self._reapers if t.is_alive()]

        def run() -> None:
            try:
                finish()
            except Exception:  # a failed close must not end the app
                log.exception("stopping %s failed", name)

        t = threading.Thread(target=run, name=name, daemon=True)
        self._reapers.append(t)
        t.start()

    def join_background(self, timeout_s: float = 10.0) -> bool:
        """Blocking: wait for the samplers being stopped in the background; True when done."""
        deadline = time.monotonic() + timeout_s
        for t in list(self._reapers):
            t.join(max(0.0, deadline - time.monotonic()))
        self._reapers = [t for t in self._reapers if t.is_alive()]
        return not self._reapers

    # ----------------------------------------------------------------- runtime

    @staticmethod
    def warm_planner() -> None:
        """Blocking (pool, at start-up): what the first :meth:`plan` would read first, read
        ahead (:func:`kvpilot.core.app.recommend.warm`)."""
        from kvpilot.core.app.recommend import warm

        warm()

    def discover_runtime(self, configured: str) -> VllmRuntime:
        """Blocking: find vLLM (profile path, env, PATH, managed). Raises RuntimeNotFoundError."""
        from kvpilot.core.runtimes.discovery import discover

        return discover(configured or None, data_dir=self.data_dir)

    def list_runtimes(self, configured: str) -> list[VllmRuntime]:
        """Blocking: every working vLLM (for the settings dialog)."""
        from kvpilot.core.runtimes.discovery import list_runtimes

        return list_runtimes(configured or None, data_dir=self.data_dir)

    def runtime_installer_factory(self) -> Callable[..., RuntimeInstaller]:
        """Builds :class:`~kvpilot.core.runtimes.installer.RuntimeInstaller` for the dialog
        (``installer_options`` are passed through: tests give wheel folders)."""
        from functools import partial

        from kvpilot.core.runtimes.installer import RuntimeInstaller

        return partial(RuntimeInstaller, **self.installer_options)

    # ----------------------------------------------------------------- planning

    @staticmethod
    def load_model(ref: str) -> ModelSpec:
        """Blocking: the ModelSpec of a local directory, catalog id or cached repo id."""
        from kvpilot.core.hub.resolve import load_model_spec

        return load_model_spec(ref)

    def plan(self, target: DeviceTarget, request: PlanRequest) -> PlanResult:
        """Blocking (pool): the application layer's ranked plans
        (:func:`kvpilot.core.app.recommend.rank`, as ``kvpilot recommend``) for the request's
        goal on ``target``, with this machine's measurements.

        A request naming a local directory or repo id plans that model only; a catalog id
        filters the catalog. Settings the user fixed (KV dtype, utilization, eager) and those
        of :attr:`plan_overrides` are kept in every plan.

        Raises:
            KvpilotError: the named model cannot be read (message says where kvpilot looked).
        """
        from kvpilot.core.app.recommend import RecommendRequest, rank

        ranking = rank(RecommendRequest(
            device=target, goal=request.goal, fixed=self.fixed_settings(request),
            model_ref=request.model_ref, measurements=self.data_dir / "measurements.json",
        ))
        if ranking.measurements_problem:
            log.warning("%s", ranking.measurements_problem)
        rows: list[PlanRow] = []
        for p in ranking.plans:
            cand = p.candidate
            title = p.model_id
            quantization = ""
            if cand is not None:
                title += f" · {cand.gpus_label}" if cand.gpus_label else ""
                quantization = _quant_label(cand.quantization, cand.weight_bits)
            rows.append(PlanRow(p, title, quantization, model_ref=p.model_ref))
        where = "measured free memory" if target.measured else "planner mode, nothing measured"
        goal = ranking.goal
        heading = (
            f"Ranked plans for {USE_CASE_LABELS.get(goal.use_case, goal.use_case)} · "
            f"{goal.context_tokens:,} context · {counted(goal.users, 'user')} on {target.name} "
            f"({where})"
        )
        if ranking.choice.sentence:
            heading += f" · {ranking.choice.sentence}"
        return PlanResult(rows, heading)

    def fixed_settings(self, request: PlanRequest) -> ServingSettings:
        """The serving settings the user fixed (the request's) with :attr:`plan_overrides`:
        the recommender keeps them in every plan it ranks."""
        from kvpilot.core.app.launch_settings import with_settings

        return with_settings(request.pinned, self.plan_overrides)

    def launch_capacity(self, inputs: PlanInputs, extra_args: Sequence[str] = ()) -> Capacity:
        """Blocking: what a launch of ``inputs`` with ``extra_args`` gets
        (:func:`kvpilot.core.app.launch.launch_capacity`, as ``kvpilot serve`` records it:
        this machine's measurements and a fixed KV block count included)."""
        from kvpilot.core.app.launch import launch_capacity
        from kvpilot.core.base.errors import SettingsError
        from kvpilot.core.fit.measurements import MeasurementStore

        store = MeasurementStore(self.data_dir / "measurements.json")
        try:
            return launch_capacity(inputs, extra_args, store)
        except SettingsError:
            log.warning("measurement file unreadable; planning without it", exc_info=True)
            return launch_capacity(inputs, extra_args, None)

    @staticmethod
    def compute_capacity(inputs: PlanInputs) -> Capacity:
        from kvpilot.core.fit.budget import compute_capacity

        return compute_capacity(inputs)

    def feasibility(
        self, inputs: PlanInputs, contexts: list[int], dtypes: tuple[str, ...] = ("auto", "fp8")
    ) -> dict[str, list[float]]:
        """Max concurrency at each context for each KV dtype (the planner's chart)."""
        from kvpilot.core.fit.recommend import feasibility

        return feasibility(inputs, contexts, dtypes)

    @staticmethod
    def launch_command_text(inputs: PlanInputs, model: str, profile: Profile) -> str:
        """The exact ``vllm serve`` command for a plan (secrets as ***)."""
        from kvpilot.core.vllm.command import LaunchSpec, build_command, profile_launch_fields

        spec = LaunchSpec.from_plan(inputs, model, **profile_launch_fields(profile))
        return build_command(spec).redacted()

    def export_text(
        self,
        inputs: PlanInputs,
        model: str,
        profile: Profile,
        fmt: str,
        gpu_ids: tuple[str, ...] = (),
    ) -> str:
        """The plan as ``fmt``, as ``kvpilot export`` writes it
        (:func:`kvpilot.core.app.export.export_plan`); one the user picked that is predicted
        not to start is exported all the same, its header saying so.

        Raises:
            CommandError: an unknown format or a plan that cannot become a command.
        """
        from kvpilot.core.app.export import export_plan
        from kvpilot.core.fit.measurements import MeasurementStore
        from kvpilot.core.vllm.command import LaunchSpec, profile_launch_fields

        spec = LaunchSpec.from_plan(inputs, model, **profile_launch_fields(profile))
        store = MeasurementStore(self.data_dir / "measurements.json")
        export = export_plan(spec, inputs, fmt, store=store, gpu_ids=gpu_ids, force=True)
        return export.text

    # ----------------------------------------------------------------- server

    def launch_spec(self, request: LaunchRequest) -> LaunchSpec:
        """The LaunchSpec for a request (profile host/port/key/HF settings, extra args)."""
        from kvpilot.core.app.profile_launch import profile_spec

        overrides = {**self.launch_overrides, **request.overrides}
        return profile_spec(request.profile, request.model, request.inputs, overrides)

    def begin_launches(self, profile: Profile | None) -> LaunchSession:
        """A new server run (a launch the user asked for): a fresh launch session with the
        profile's fallback policy; the fallbacks after it reuse the session (and its count)."""
        from kvpilot.core.app.launch import LaunchSession
        from kvpilot.core.app.profile_launch import fallback_policy

        self.session = LaunchSession(
            self.runtime,  # type: ignore[arg-type]  # set by start_server before any launch
            self.data_dir,
            on_event=self._supervisor_event_sink(),
            policy=fallback_policy(profile),
            run_profile=profile.name if profile is not None else None,
            run_source="gui",
            run_telemetry=lambda: self.telemetry,
            free_memory_now=self._free_memory_now,
        )
        return self.session

    def _session(self, runtime: VllmRuntime | None = None) -> LaunchSession:
        session = self.session if self.session is not None else self.begin_launches(None)
        if runtime is not None:
            session.runtime = runtime
        session.supervisor_options = dict(self.supervisor_options)
        session.gpu_pids_check = self._gpu_pids if self.gpu_sampler is not None else None
        return session

    def start_server(
        self, runtime: VllmRuntime, spec: LaunchSpec, inputs: PlanInputs | None = None
    ) -> Supervisor:
        """Blocking (orphans, NVML, download, flag check, spawn): the launch session's steps
        for ``spec``; events go to the bridge.

        With the plan's ``inputs``, what vLLM reports once ready is recorded in
        ``<data_dir>/measurements.json`` under the plan's key (the planners calibrate with it).

        Raises:
            CommandError: the orphan policy refuses (a server an earlier kvpilot left running
                or another program holds the port), or a flag vLLM does not know.
            StartupRefusedError: vLLM's free-memory check would fail right now.
            DownloadError: the checkpoint cannot be downloaded.
        """
        session = self._session(runtime)
        with self._lock:
            old = self.supervisor
        if old is not None and old.state not in ("stopped", "failed", None):
            old.stop()
        session.refuse_next_to_orphans(spec.port, spec.host)  # the one orphan policy
        session.refuse_a_failing_start(inputs)
        self.telemetry.clear()
        self.take_log_lines()  # lines of an earlier server are not this one's
        # a Hub checkpoint not in the cache is downloaded by kvpilot first (progress to the GUI)
        self.download_cancel.clear()
        self._downloading = True
        try:
            spec = session.download(spec, self.bridge.emitter("download_progress"),
                                    self.download_cancel)
        finally:
            self._downloading = False
        sup = session.supervisor(spec, inputs)
        with self._lock:
            self.supervisor = sup
        sup.start()
        return sup

    def expected_dry_run_s(self, inputs: PlanInputs) -> tuple[float, float, str]:
        """(low, high, basis) seconds the measured dry run of ``inputs`` should take."""
        from kvpilot.core.app.measure import expected_dry_run_s
        from kvpilot.core.base.errors import SettingsError
        from kvpilot.core.fit.measurements import MeasurementStore

        try:
            return expected_dry_run_s(inputs, MeasurementStore(self.data_dir / "measurements.json"))
        except SettingsError:
            return expected_dry_run_s(inputs, None)

    def measure_plan(
        self, runtime: VllmRuntime, request: LaunchRequest, cancel: threading.Event,
        timeout_s: float = MEASURE_TIMEOUT_S,
    ) -> Measured:
        """Blocking (minutes): "Measure on this GPU": the application layer's dry run of
        ``request`` (:func:`kvpilot.core.app.measure.measure_plan`, as ``kvpilot plan
        --measure``) with the profile's launch, stored under the plan's key; the words of its
        start-up phases go to the bridge's ``measure_phase``, not to the server panel.

        Raises:
            MeasurementError: vLLM failed, timed out or ``cancel`` was set.
            CommandError: a server an earlier kvpilot left runs, or the spec is not a command.
        """
        from kvpilot.core.app.measure import MeasureRequest, measure_plan

        return measure_plan(
            MeasureRequest(runtime, request.inputs, self.data_dir, self.launch_spec(request),
                           timeout_s),
            on_phase=self.bridge.emitter("measure_phase"),
            supervisor_options=self.supervisor_options,
            gpu_pids_check=self._gpu_pids if self.gpu_sampler is not None else None,
            cancel=cancel,
        )

    def _free_memory_now(self) -> tuple[int, tuple[tuple[str, int], ...]] | None:
        """Blocking (one NVML pass): the sampled GPUs' free memory now and what holds it, read
        as ``kvpilot serve`` reads it (:func:`kvpilot.core.hardware.free_now.read_free_memory`),
        this server's own processes left out; None without a sampled GPU."""
        from kvpilot.core.hardware.free_now import read_free_memory

        sampler = self.gpu_sampler
        if sampler is None:
            return None
        indices = getattr(sampler, "indices", None) or (sampler.index,)
        own = frozenset(self.supervisor.tree_pids()) if self.supervisor is not None else frozenset()
        return read_free_memory(indices, nvml_module=self.nvml_module(), exclude_pids=own)

    def _supervisor_event_sink(self) -> Callable[[SupervisorEvent], None]:
        """The supervisor's ``on_event``: output lines to the batch buffer, the rest as signals."""
        from kvpilot.core.vllm.supervisor import LogLineEvent

        emit = self.bridge.emitter("server_event")

        def sink(ev: SupervisorEvent) -> None:
            if isinstance(ev, LogLineEvent):
                with self._log_lock:
                    if len(self._log_lines) == self._log_lines.maxlen:
                        self._log_dropped += 1
                    self._log_lines.append(ev)
            else:
                emit(ev)

        return sink

    def take_log_lines(self) -> tuple[list[LogLineEvent], int]:
        """The output lines since the last call, and how many were dropped before being taken."""
        with self._log_lock:
            lines = list(self._log_lines)
            self._log_lines.clear()
            dropped, self._log_dropped = self._log_dropped, 0
        return lines, dropped

    def _gpu_pids(self) -> set[int]:
        sampler = self.gpu_sampler
        sample = sampler.sample_once() if sampler is not None else None
        if sample is None:
            return set()
        return set(sample.process_used_bytes)

    def stop_server(self) -> StopReport | None:
        """Blocking (up to ~20 s): stop the server tree. Returns the StopReport or None."""
        self.download_cancel.set()
        self.stop_metrics()
        with self._lock:
            sup = self.supervisor
        if sup is None:
            return None
        return sup.stop()

    def server_running(self) -> bool:
        """True from the start of a launch (model download included) until it has stopped."""
        sup = self.supervisor
        return self._downloading or (
            sup is not None and sup.state in ("starting", "ready", "stopping")
        )

    def attach(
        self, url: str, api_key: str | None = None, log_path: str | None = None
    ) -> WatchSample:
        """Blocking (one or two HTTP requests): who serves at ``url`` and its first sample.

        Returns the :class:`~kvpilot.core.app.watch.WatchSample` (its ``identity`` names the
        server). The GPU for the full prediction is the sampled one when the server is local.

        Raises:
            WatchError: the URL is not usable or the server does not answer.
        """
        from kvpilot.core.app.watch import ServerWatch, is_local_url, normalize_url

        base_url = normalize_url(url)
        total, name = self.attach_gpu if is_local_url(base_url) else (None, "")
        watch = ServerWatch(base_url, api_key=api_key, gpu_total_bytes=total, gpu_name=name,
                            log_path=log_path)
        try:
            watch.start()
            return watch.poll()
        finally:
            watch.close()

    def start_metrics(self, base_url: str, rate_hz: float, api_key: str | None = None) -> None:
        """Scrape ``base_url``/metrics in the core sampler thread into telemetry."""
        from kvpilot.core.vllm.metrics import MetricsSampler, MetricsScraper

        self.stop_metrics()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        scraper = MetricsScraper(base_url, headers=headers)
        telemetry = self.telemetry
        emit = self.bridge.emitter("metrics_sample")

        def current() -> bool:
            # a sampler being stopped in the background may finish one last scrape: drop it
            return self.metrics_sampler is sampler

        def on_sample(sample: MetricsSample) -> None:
            if current():
                telemetry.add_vllm_sample(sample)
                emit(sample)

        def on_error(t_s: float, error: ScrapeError) -> None:
            if current():
                telemetry.add_scrape_error(t_s, error)

        sampler = MetricsSampler(scraper, on_sample, on_error, interval_s=1.0 / max(0.1, rate_hz))
        self.metrics_sampler = sampler
        self._metrics_scraper = scraper
        sampler.start()

    def stop_metrics(self) -> None:
        """Stop scraping /metrics without waiting (the thread ends in the background)."""
        sampler, self.metrics_sampler = self.metrics_sampler, None
        scraper, self._metrics_scraper = self._metrics_scraper, None
        self._stop_loop(sampler, "kvpilot-stop-metrics", scraper.close if scraper else None)

    def shutdown(self) -> None:
        """Blocking: stop the server this session started, the samplers and scrapers."""
        try:
            self.stop_server()
        finally:
            self.stop_loops()
            self.join_background()

    # ----------------------------------------------------------------- orphans

    def find_orphans(self) -> list[OrphanServer]:
        """Blocking: servers started by an earlier kvpilot that is gone (pidfiles in data_dir)."""
        from kvpilot.core.vllm.orphans import find_orphans

        return find_orphans(self.data_dir)

    def stop_orphan(self, orphan: OrphanServer) -> StopReport:
        """Blocking: stop an orphaned server's whole process group. Returns the StopReport."""
        from kvpilot.core.vllm.orphans import stop_orphan

        return stop_orphan(orphan)

    def adopt_orphan(self, orphan: OrphanServer) -> Supervisor:
        """Supervise an orphaned server from now on (events go to the bridge)."""
        from kvpilot.core.vllm.supervisor import Supervisor

        sup = Supervisor.attach(
            orphan, data_dir=self.data_dir, on_event=self._supervisor_event_sink()
        )
        with self._lock:
            self.supervisor = sup
        return sup

    # ----------------------------------------------------------------- fallback

    def after_failure(self, failure: Failure, request: LaunchRequest) -> FallbackStep:
        """Blocking (NVML, the fit engine): the launch session's step after a failure of
        ``request`` (:meth:`kvpilot.core.app.launch.LaunchSession.after_failure`, as
        ``kvpilot serve`` takes it): the fallback the profile's policy takes by itself
        (counted), or the ranked ones offered."""
        return self._session().after_failure(failure, self.launch_spec(request), request.inputs)


def describe(mapping: Mapping[str, object]) -> str:
    """``k=v, k=v`` for log lines (no secrets are ever passed here)."""
    return ", ".join(f"{k}={v}" for k, v in mapping.items())

