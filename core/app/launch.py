"""One launch of ``vllm serve``, for the command line and the window alike.

A :class:`LaunchSession` holds what every launch does, in order: take the orphan policy's
decision about servers an earlier kvpilot left running (:mod:`kvpilot.core.app.orphan_policy`),
read the GPU's free memory again (:mod:`kvpilot.core.hardware.free_now`: a desktop's use
changes between planning and launching) and refuse what vLLM's start-up check would refuse,
download a Hub
checkpoint that is not cached yet, key the plan's measurement (the key every planner looks up),
start the supervisor, and after a failure rank the fallbacks on the capacity the planner shows
(calibrated by this GPU's measurements) and decide whether to take the first by itself
(:meth:`LaunchSession.after_failure`: a :class:`FallbackTaken` or :class:`FallbacksOffered`).

``kvpilot serve`` and ``plan --measure`` and the window call it and only render what it says; the
measured dry run (:func:`kvpilot.core.app.measure.measure_plan`) is the same launch with
``--load-format dummy``.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.app.orphan_policy import WINDOW_WORDS, OrphanDecision, OrphanWords
from kvpilot.core.base import failures
from kvpilot.core.base.errors import CommandError, KvpilotError
from kvpilot.core.fit.calibrate import key_for, planned_capacity
from kvpilot.core.fit.measurements import (
    MeasurementKey,
    MeasurementStore,
    launch_recorder,
)
from kvpilot.core.fit.startup import StartupRefusal, startup_refusal
from kvpilot.core.fit.support import fp8_kv_supported
from kvpilot.core.hub.cache import hub_cache_dir, is_repo_id

if TYPE_CHECKING:
    from kvpilot.core.base.failures import Failure
    from kvpilot.core.base.plan import Capacity, PlanInputs
    from kvpilot.core.fit.fallback import FallbackOption
    from kvpilot.core.hub.download import DownloadProgress
    from kvpilot.core.runs.recorder import RunRecorder
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.telemetry.live import Telemetry
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.orphans import OrphanServer
    from kvpilot.core.vllm.supervisor import Supervisor, SupervisorEvent

#: fallbacks taken by themselves in a row at most (the ranked options usually run out first)
MAX_AUTO_FALLBACKS = 8
#: ``FallbackChoice.kind`` of vLLM's own estimate of the longest context that fits
VLLM_ESTIMATE = "vllm_estimate"
#: vLLM rounds KV allocation to blocks; lengths that are multiples of 16 fit
BLOCK_MULTIPLE = 16


@dataclass(frozen=True)
class FallbackChoice:
    """A next configuration after a failure: ``description`` (with the predicted effect),
    the spec and plan inputs to launch, the settings that differ (``changes``, vLLM's names),
    and the fit engine's option behind it (None for vLLM's own estimate alone)."""

    description: str
    spec: LaunchSpec
    inputs: PlanInputs | None
    changes: dict[str, Any]
    option: FallbackOption | None = None

    @property
    def capacity(self) -> Capacity | None:
        """The predicted capacity of the new configuration (None when not planned)."""
        return self.option.capacity if self.option is not None else None

    @property
    def kind(self) -> str:
        """The fit engine's option kind (``fp8_kv``, ``shorter_context``, ...), or
        ``vllm_estimate`` for vLLM's estimated maximum length alone."""
        return self.option.kind if self.option is not None else VLLM_ESTIMATE

    @property
    def label(self) -> str:
        """A button's text: the change and its predicted effect."""
        return self.option.label if self.option is not None else self.description

    @property
    def change(self) -> str:
        """One phrase: what differs from the failed configuration."""
        return self.option.change if self.option is not None else self.description

    @property
    def predicted_fits(self) -> bool | None:
        """Whether the new configuration is predicted to start (None: not planned)."""
        return self.option.predicted_fits if self.option is not None else None

    @property
    def tooltip(self) -> str:
        """What differs, and a warning when the new configuration is predicted not to fit."""
        if self.predicted_fits is False:
            return f"{self.change} (predicted not to fit either)"
        return self.change


class StartupRefusedError(KvpilotError):
    """A launch was not started because vLLM's start-up check would fail right now
    (:meth:`LaunchSession.refuse_a_failing_start`); ``refusal`` carries the failure and the plan
    made with the memory free now, from which the fallbacks start."""

    def __init__(self, refusal: StartupRefusal) -> None:
        super().__init__(refusal.failure.message)
        self.refusal = refusal


@dataclass(frozen=True)
class FallbackPolicy:
    """Whether a failed launch relaunches with the best fallback by itself, and how often in a
    row (a profile setting in the window, ``--auto-fallback`` on the command line)."""

    automatic: bool = False
    max_attempts: int = MAX_AUTO_FALLBACKS

    def next_choice(self, choices: Sequence[FallbackChoice], taken: int) -> FallbackChoice | None:
        """The choice to take by itself after ``taken`` automatic fallbacks, else None: the
        best that keeps the checkpoint (another one would be a download nobody asked for) and
        changes a setting (freeing the GPU is the user's to do), and that leaves every adapter
        loadable (a lower LoRA rank is the user's to choose)."""
        if not self.automatic or taken >= self.max_attempts:
            return None
        from kvpilot.core.fit.fallback_adapters import NOT_AUTOMATIC

        return next((c for c in choices if c.changes and "model" not in c.changes
                     and c.kind not in NOT_AUTOMATIC), None)


@dataclass(frozen=True)
class FallbackTaken:
    """A failure of kind ``kind`` was answered by the policy itself: ``choice`` is launched
    next, the ``attempt``-th automatic fallback of at most ``max_attempts``."""

    kind: str
    choice: FallbackChoice
    attempt: int
    max_attempts: int

    @property
    def sentence(self) -> str:
        """``fallback 1/8: <the change and its predicted effect>``."""
        return f"fallback {self.attempt}/{self.max_attempts}: {self.choice.description}"


@dataclass(frozen=True)
class FallbacksOffered:
    """A failure the policy leaves to the user: ``choices`` ranked best first (may be
    empty: nothing is known to fit instead)."""

    failure: Failure
    choices: tuple[FallbackChoice, ...]


#: what a launch session decides after a failure
FallbackStep = FallbackTaken | FallbacksOffered


def launch_signature(spec: LaunchSpec) -> tuple[str, ...]:
    """What a launch of ``spec`` asks vLLM for: the model, every serving setting and the extra
    arguments (equal for two specs that launch the same server)."""
    from kvpilot.core.base.plan import settings_dict

    settings = settings_dict(spec)
    return (spec.model, *(f"{k}={settings[k]!r}" for k in sorted(settings)), *spec.extra_args)


def _spec_for_inputs(spec: LaunchSpec, inputs: PlanInputs) -> LaunchSpec:
    from kvpilot.core.vllm.command import LaunchSpec

    planned = LaunchSpec.from_plan(inputs, spec.model)
    # the release's capture-size flag is how, not what: carried, never a "change"
    return dataclasses.replace(
        spec.with_settings(planned), cudagraph_size_flag=planned.cudagraph_size_flag
    )


def builtin_fallbacks(
    failure: Failure, spec: LaunchSpec, inputs: PlanInputs | None
) -> list[FallbackChoice]:
    """The fallback without the fit engine: vLLM's estimated maximum length.

    For ``kv_cache_too_small`` with an estimate, ``max_model_len`` becomes the estimate rounded
    down to a multiple of 16 (vLLM's smallest block).
    """
    est = getattr(failure, "estimated_max_model_len", None)
    if failure.kind != failures.KV_CACHE_TOO_SMALL or not est:
        return []
    new_len = (int(est) // BLOCK_MULTIPLE) * BLOCK_MULTIPLE
    if new_len < BLOCK_MULTIPLE or new_len == spec.max_model_len:
        return []
    new_spec = dataclasses.replace(spec, max_model_len=new_len, auto_max_model_len=False)
    new_inputs = dataclasses.replace(inputs, max_model_len=new_len) if inputs else None
    return [FallbackChoice(
        description=f"use vLLM's estimated maximum length: max_model_len {new_len}",
        spec=new_spec, inputs=new_inputs, changes={"max_model_len": new_len},
    )]


#: the ``vllm serve`` argument that fixes the number of KV blocks, whatever the budget
BLOCKS_OVERRIDE_FLAG = "--num-gpu-blocks-override"


def blocks_override(extra_args: Sequence[str]) -> int | None:
    """The KV block count ``--num-gpu-blocks-override N`` (or ``=N``) in ``extra_args`` fixes,
    or None when it is not there or not a whole number."""
    value: str | None = None
    for i, arg in enumerate(extra_args):
        if arg == BLOCKS_OVERRIDE_FLAG and i + 1 < len(extra_args):
            value = extra_args[i + 1]
        elif arg.startswith(BLOCKS_OVERRIDE_FLAG + "="):
            value = arg.split("=", 1)[1]
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def launch_capacity(
    inputs: PlanInputs, extra_args: Sequence[str] = (), store: MeasurementStore | None = None
) -> Capacity:
    """The capacity a launch of ``inputs`` with ``extra_args`` gets: the planner's
    (:func:`planned_capacity`, this GPU's measurements included), with what the extra
    arguments fix (:func:`with_launch_args`)."""
    return with_launch_args(inputs, planned_capacity(inputs, store), extra_args)


def with_launch_args(
    inputs: PlanInputs, capacity: Capacity, extra_args: Sequence[str]
) -> Capacity:
    """``capacity`` of ``inputs`` with the KV cache vLLM is told to allocate when an extra
    argument fixes it (``--num-gpu-blocks-override N``: N blocks whatever the budget)."""
    blocks = blocks_override(extra_args)
    if blocks is None or blocks < 0:
        return capacity
    from kvpilot.core.fit.calibrate import fixed_kv_capacity

    return fixed_kv_capacity(
        inputs, capacity, blocks * capacity.page_bytes_per_block,
        f"{BLOCKS_OVERRIDE_FLAG} {blocks}: vLLM allocates {blocks} KV blocks whatever the budget",
    )


#: telemetry pressure-signal kinds that have a configuration fix (kvpilot.core.telemetry.live)
PRESSURE_KV_FULL = "kv_full"
PRESSURE_PREEMPTIONS = "preemptions"
PRESSURE_VRAM_FULL = "vram_full"
#: vLLM 0.34 launched with a desktop cap: free memory fell under the room it left
PRESSURE_DESKTOP_HEADROOM = "desktop_headroom"


def fix_for_pressure(
    kind: str, inputs: PlanInputs, capacity: Capacity | None = None
) -> PlanInputs | None:
    """The plan to relaunch with when the running server shows the pressure signal ``kind``
    (:class:`kvpilot.core.telemetry.live.PressureSignal`; the dashboard's button), planned
    from the running plan ``inputs`` and its predicted ``capacity``; None when no setting
    relieves it.

    * KV cache nearly full with requests waiting: FP8 KV where the GPU supports it, otherwise
      one sequence fewer;
    * preemptions rising: one sequence fewer;
    * VRAM nearly full while other processes grow, or (vLLM 0.34) free memory under the room
      the desktop cap left: 0.03 less utilization.
    """
    seqs = inputs.max_num_seqs or (capacity.max_num_seqs if capacity else 2)
    if kind == PRESSURE_KV_FULL:
        if (inputs.kv_cache_dtype or "auto") == "auto" and fp8_kv_supported(
            inputs.compute_capability, inputs.model.head_dim, inputs.vllm_version
        ):
            return dataclasses.replace(inputs, kv_cache_dtype="fp8")
        return dataclasses.replace(inputs, max_num_seqs=max(1, seqs - 1))
    if kind == PRESSURE_PREEMPTIONS:
        return dataclasses.replace(inputs, max_num_seqs=max(1, seqs - 1))
    if kind in (PRESSURE_VRAM_FULL, PRESSURE_DESKTOP_HEADROOM):
        util = inputs.gpu_memory_utilization or (
            capacity.gpu_memory_utilization if capacity else 0.9
        )
        return dataclasses.replace(inputs, gpu_memory_utilization=round(max(0.1, util - 0.03), 2))
    return None


def rank_fallbacks(
    failure: Failure,
    spec: LaunchSpec,
    inputs: PlanInputs | None,
    *,
    store: MeasurementStore | None = None,
    free_bytes: int | None = None,
) -> list[FallbackChoice]:
    """Ranked next configurations for ``failure`` of ``spec`` (best first; may be empty): the
    fit engine's options, each planned with :func:`planned_capacity` and ``store`` (what the
    planner shows), else :func:`builtin_fallbacks`. ``free_bytes`` is the free memory now."""
    from kvpilot.core.fit import fallback as fit_fallback

    choices: list[FallbackChoice] = []
    if inputs is not None:
        def plan(new: PlanInputs) -> Capacity:
            return launch_capacity(new, spec.extra_args, store)

        for option in fit_fallback.propose(failure, inputs, free_bytes=free_bytes, plan=plan):
            new_spec = _spec_for_inputs(spec, option.inputs)
            if option.inputs.model.model_id != inputs.model.model_id:
                new_spec = dataclasses.replace(new_spec, model=option.inputs.model.model_id)
            changes = spec.settings_changes(new_spec)
            if new_spec.model != spec.model:
                changes["model"] = new_spec.model
            # "close other programs" changes no setting: the same launch once memory is free
            if changes or option.kind == fit_fallback.FREE_THE_GPU:
                choices.append(FallbackChoice(
                    fit_fallback.describe(option), new_spec, option.inputs, changes, option
                ))
    return choices or builtin_fallbacks(failure, spec, inputs)


@dataclass
class LaunchSession:
    """The launches of one server: the first and the fallbacks after it.

    Args:
        runtime: the vLLM to run.
        data_dir: logs, pidfiles and ``measurements.json``.
        on_event: the supervisor's listener (called from its threads).
        policy: whether to take the best fallback by itself.
        free_memory_now: reads the GPU's free memory again right before a launch: (free bytes,
            holders as (name, bytes)), or None where nothing can be read (planner mode, CPU).
        supervisor_options: extra keyword arguments for the Supervisor (timeouts, tests).
        gpu_pids_check: the pids holding GPU memory (NVML) for a stop that checks none is left.
    """

    runtime: VllmRuntime
    data_dir: Path
    on_event: Callable[[SupervisorEvent], None] | None = None
    policy: FallbackPolicy = field(default_factory=FallbackPolicy)
    free_memory_now: Callable[[], tuple[int, tuple[tuple[str, int], ...]] | None] | None = None
    supervisor_options: dict[str, Any] = field(default_factory=dict)
    gpu_pids_check: Callable[[], set[int]] | None = None
    #: automatic fallbacks taken so far
    fallbacks_taken: int = 0
    #: keep every launch as a run record in ``<data_dir>/runs`` (:mod:`kvpilot.core.runs`)
    record_runs: bool = True
    #: the settings profile launched (None: command-line flags), and which face launched it
    run_profile: str | None = None
    run_source: str = "cli"
    #: the face's telemetry of the run (summarised into the record when the run ends)
    run_telemetry: Callable[[], Telemetry | None] | None = None
    #: the record keeper of the newest launch (None before one, or when not recording)
    recorder: RunRecorder | None = None
    #: what each launch so far asked vLLM for (:func:`launch_signature`)
    launched: list[tuple[str, ...]] = field(default_factory=list)
    #: ranked choices of earlier failures not taken yet, best first
    untried: list[FallbackChoice] = field(default_factory=list)

    @property
    def store(self) -> MeasurementStore:
        """The measurements every planner reads (``<data_dir>/measurements.json``)."""
        return MeasurementStore(Path(self.data_dir) / "measurements.json")

    # ------------------------------------------------------------------ before the launch

    def orphans(self) -> list[OrphanServer]:
        """Servers an earlier kvpilot left running (read from the pidfiles)."""
        from kvpilot.core.vllm.orphans import find_orphans

        return find_orphans(Path(self.data_dir))

    def orphan_decision(
        self, host: str, port: int | None, *, stop: bool = False,
        words: OrphanWords = WINDOW_WORDS,
    ) -> OrphanDecision:
        """What a launch on ``host`` asking for ``port`` does about the servers an earlier
        kvpilot left running (:func:`kvpilot.core.app.orphan_policy.decide_orphans`, the one
        policy of both faces); ``stop`` when the user asked to stop them first.

        Raises:
            CommandError: the host cannot be resolved or ``port`` is out of range.
        """
        from kvpilot.core.app.orphan_policy import decide_orphans

        return decide_orphans(self.orphans(), host=host, port=port, stop=stop, words=words)

    def refuse_next_to_orphans(self, port: int | None, host: str = "127.0.0.1") -> None:
        """Refuse a launch the orphan policy refuses (an orphan, which may be loading and not
        listen yet, or another program holds ``port``).

        Raises:
            CommandError: refused (the sentence names the holder and the way out).
        """
        decision = self.orphan_decision(host, port)
        if decision.refused:
            raise CommandError(decision.sentence)

    def startup_check(self, inputs: PlanInputs | None) -> StartupRefusal | None:
        """vLLM's free-memory check with the memory free right now; None when it passes or
        cannot be made (no plan, nothing to read)."""
        if inputs is None or self.free_memory_now is None:
            return None
        now = self.free_memory_now()
        if now is None:
            return None
        free, holders = now
        return startup_refusal(inputs, free, holders)

    def refuse_a_failing_start(self, inputs: PlanInputs | None) -> None:
        """Refuse a launch vLLM's free-memory check would refuse right now
        (:meth:`startup_check`); the window's launch takes this step, the command line renders
        the refusal itself.

        Raises:
            StartupRefusedError: the memory free now is below what the plan asks vLLM for.
        """
        refusal = self.startup_check(inputs)
        if refusal is not None:
            raise StartupRefusedError(refusal)

    @staticmethod
    def download(
        spec: LaunchSpec,
        on_progress: Callable[[DownloadProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> LaunchSpec:
        """The spec with a local folder for its model: a Hub checkpoint not in the cache is
        downloaded first (``on_progress`` is told; ``cancel`` stops and keeps the partial file).

        Raises:
            DownloadError: gated, missing, unreachable, not enough disk (a KvpilotError).
        """
        return launchable_spec(spec, on_progress=on_progress, cancel_event=cancel)


    # ------------------------------------------------------------------ the launch

    def measurement_key(self, inputs: PlanInputs | None) -> MeasurementKey | None:
        """The plan's measurement key (the one the planners look up); None without a plan: a
        model that cannot be read cannot be planned either, so its numbers are not kept."""
        return key_for(inputs) if inputs is not None else None

    def supervisor(self, spec: LaunchSpec, inputs: PlanInputs | None) -> Supervisor:
        """A supervisor for ``spec`` that stores what vLLM reports under the plan's key (not
        started)."""
        from kvpilot.core.vllm.supervisor import Supervisor

        options = dict(self.supervisor_options)
        key = self.measurement_key(inputs)
        if key is not None and "on_ready_capacity" not in options:
            options["on_ready_capacity"] = launch_recorder(self.store, key)
        on_event = self.on_event
        recorder = self._recorder(spec, inputs) if self.record_runs else None
        if recorder is not None:
            on_event = _chain(recorder.on_event, self.on_event)
        sup = Supervisor(self.runtime, spec, data_dir=Path(self.data_dir),
                         on_event=on_event, gpu_pids_check=self.gpu_pids_check, **options)
        if recorder is not None:
            recorder.attach(sup)
        self.recorder = recorder
        return sup

    def _recorder(self, spec: LaunchSpec, inputs: PlanInputs | None) -> RunRecorder:
        """The run record keeper of a launch of ``spec`` (its predicted capacity planned as
        the planner plans); None when the plan cannot be computed is no reason: the record
        then has no prediction."""
        from kvpilot.core.runs.recorder import RunRecorder
        from kvpilot.core.runs.store import RunStore

        predicted = None
        if inputs is not None:
            try:
                predicted = launch_capacity(inputs, spec.extra_args, self.store)
            except Exception:  # noqa: BLE001 - a prediction is not worth a failed launch
                predicted = None
        note = f"automatic fallback {self.fallbacks_taken}" if self.fallbacks_taken else ""
        return RunRecorder(
            RunStore(Path(self.data_dir)), spec, self.runtime, predicted=predicted,
            profile=self.run_profile, source=self.run_source, telemetry=self.run_telemetry,
            note=note,
        )

    def start(self, spec: LaunchSpec, inputs: PlanInputs | None) -> Supervisor:
        """Start a supervised server for ``spec``. Blocking for the flag check and the spawn.

        Raises:
            CommandError: a flag the runtime does not know, or the spec cannot become a command.
        """
        sup = self.supervisor(spec, inputs)
        self.launched.append(launch_signature(spec))
        sup.start()
        return sup

    # ------------------------------------------------------------------ after a failure

    def fallbacks(
        self, failure: Failure, spec: LaunchSpec, inputs: PlanInputs | None,
        free_bytes: int | None = None,
    ) -> list[FallbackChoice]:
        """Ranked next configurations, planned as the planner plans (this GPU's measurements
        included)."""
        return rank_fallbacks(failure, spec, inputs, store=self.store, free_bytes=free_bytes)

    def automatic_choice(self, choices: Sequence[FallbackChoice]) -> FallbackChoice | None:
        """The fallback the policy takes by itself now (counted), else None.

        The ranked options are walked to the end: after a fallback failed too, the next option
        of the earlier ranking comes next (each is a complete plan of its own), then what the
        newest failure proposes; a choice that would launch what was already launched is
        skipped.
        """
        fresh: list[FallbackChoice] = []
        seen = set(self.launched)
        for c in (*self.untried, *choices):
            signature = launch_signature(c.spec)
            if signature not in seen:
                seen.add(signature)
                fresh.append(c)
        choice = self.policy.next_choice(fresh, self.fallbacks_taken)
        if choice is not None:
            self.fallbacks_taken += 1
            self.launched.append(launch_signature(choice.spec))  # launched or refused next
            self.untried = [c for c in fresh if c is not choice]
        return choice

    def after_failure(
        self, failure: Failure, spec: LaunchSpec, inputs: PlanInputs | None,
        free_bytes: int | None = None,
    ) -> FallbackStep:
        """The fallback loop's step after ``failure`` of ``spec`` (vLLM's, or the start-up
        refusal): the ranked fallbacks (:meth:`fallbacks`, with the memory free now:
        ``free_bytes``, else read again, else the plan's), and either the one the policy takes
        by itself (:meth:`automatic_choice`, counted) or all of them offered. Blocking (NVML,
        the fit engine): the window calls it on its pool."""
        if free_bytes is None and self.free_memory_now is not None:
            now = self.free_memory_now()
            free_bytes = now[0] if now is not None else None
        choices = self.fallbacks(failure, spec, inputs, free_bytes)
        choice = self.automatic_choice(choices)
        if choice is not None:
            return FallbackTaken(failure.kind, choice, self.fallbacks_taken,
                                 self.policy.max_attempts)
        return FallbacksOffered(failure, tuple(choices))


def launchable_spec(
    spec: LaunchSpec,
    *,
    on_progress: Callable[[DownloadProgress], None] | None = None,
    cancel_event: threading.Event | None = None,
) -> LaunchSpec:
    """The spec to launch: a Hub checkpoint is first made complete in the local cache.

    A local folder is served offline (``HF_HUB_OFFLINE=1``: nothing of it is on the Hub);
    anything else that is not a repo id is returned unchanged. For a repo id the
    files vLLM needs are downloaded by kvpilot (disk space checked first, progress through
    ``on_progress``, resumable, cancellable) into the profile's cache (``spec.hf_home``) or the
    default one, and the returned spec points vLLM at the snapshot folder with
    ``HF_HUB_OFFLINE=1``; the repo id stays the served model name. Blocking.

    Raises:
        DownloadError: gated, missing, unreachable, not enough disk, cancelled.
    """
    if Path(spec.model).expanduser().exists():
        return dataclasses.replace(spec, hf_offline=True)
    if not is_repo_id(spec.model):
        return spec
    from kvpilot.core.hub.download import ensure_downloaded  # huggingface_hub: when needed

    snapshot = ensure_downloaded(
        spec.model,
        token=spec.hf_token,
        cache_dir=hub_cache_dir(hf_home=spec.hf_home),
        on_progress=on_progress,
        cancel_event=cancel_event,
    )
    return dataclasses.replace(
        spec,
        model=str(snapshot),
        hf_offline=True,
        served_model_name=spec.served_model_name or spec.model,
    )


def _chain(
    recorder: Callable[[SupervisorEvent], None], face: Callable[[SupervisorEvent], None] | None
) -> Callable[[SupervisorEvent], None]:
    """One listener for the run recorder and the face's own: the face hears every event first
    (its output keeps the order the supervisor's threads give it), except the end of the run,
    which the recorder writes first, so that a face told of the end finds the record done."""
    if face is None:
        return recorder

    def both(ev: SupervisorEvent) -> None:
        if run_ended(ev):
            recorder(ev)
            face(ev)
        else:
            face(ev)
            recorder(ev)

    return both


def run_ended(ev: object) -> bool:
    """Whether a supervisor event ends the run (the server stopped or failed). A face told of
    it through a launch session finds the run's record written by then (:func:`_chain`)."""
    from kvpilot.core.vllm.supervisor import TERMINAL_STATES, StateEvent

    return isinstance(ev, StateEvent) and ev.state in TERMINAL_STATES
