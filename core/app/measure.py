"""Measure: the dry run that starts vLLM with dummy weights to read what it reports, for
``kvpilot plan --measure`` and the window's "Measure on this GPU" alike.

:func:`measure_plan` is the one use case both faces call. It takes the plan's launch (the face's
own: a profile's host, API key and extra arguments; else the plan's), asks for dummy weights
(``--load-format dummy``: nothing is downloaded but the config) on a free port from the one the
launch names, refuses while a server an earlier kvpilot left still runs (the launch session's
orphan rule), waits for vLLM's capacity numbers, stops, and stores them under the plan's key
(:func:`kvpilot.core.fit.calibrate.key_for`) in ``<data_dir>/measurements.json``, where every
planner finds them ("measured"). The faces only show the progress and the result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.fit.calibrate import key_for
from kvpilot.core.fit.measurements import Measured, MeasurementStore

if TYPE_CHECKING:
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.supervisor import SupervisorEvent

#: what a first dry run usually takes when this GPU has not run the model before (s): vLLM's
#: start-up with dummy weights is its profile run, torch.compile and the CUDA-graph capture
TYPICAL_DRY_RUN_S = (60.0, 180.0)
#: seconds a dry run may take before it is given up, where the face names no other limit
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class MeasureRequest:
    """A dry run to make: the plan (``inputs``), the vLLM to run, the folder of logs, pidfiles
    and ``measurements.json`` (``data_dir``), the launch (``spec``; None: the plan's own, the
    model from where its spec was read) and the seconds it may take (``timeout_s``)."""

    runtime: VllmRuntime
    inputs: PlanInputs
    data_dir: Path
    spec: LaunchSpec | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S


def newest_startup_s(inputs: PlanInputs, store: MeasurementStore) -> float | None:
    """The newest measured start-up time (seconds) of this model on this GPU, if any.

    Raises:
        SettingsError: ``store`` is not a measurement file.
    """
    timed = [r for r in store.for_model(key_for(inputs)) if r.measured.startup_s]
    if not timed:
        return None
    return max(timed, key=lambda r: r.measured.measured_at).measured.startup_s


def expected_dry_run_s(
    inputs: PlanInputs, store: MeasurementStore | None
) -> tuple[float, float, str]:
    """(low, high, basis) seconds a measured dry run of ``inputs`` is expected to take: the
    newest start-up time measured for this model on this GPU (:func:`newest_startup_s`), else
    :data:`TYPICAL_DRY_RUN_S`.

    Raises:
        SettingsError: ``store`` is not a measurement file.
    """
    seconds = newest_startup_s(inputs, store) if store is not None else None
    if seconds:
        return seconds, seconds * 1.25, "its last start-up on this GPU"
    low, high = TYPICAL_DRY_RUN_S
    return low, high, "no earlier start-up of this model on this GPU"


def dry_run_spec(request: MeasureRequest) -> LaunchSpec:
    """The launch the dry run starts: the request's (or the plan's own) with dummy weights, on
    the first free port from the one it names.

    Raises:
        CommandError: the host cannot be resolved or no port could be bound.
    """
    from kvpilot.core.hub.identity import launch_reference
    from kvpilot.core.vllm.command import LaunchSpec, find_free_port

    spec = request.spec
    if spec is None:
        spec = LaunchSpec.from_plan(request.inputs, launch_reference(request.inputs.model))
    return replace(spec, load_format="dummy", port=find_free_port(spec.host, spec.port))


def measure_plan(
    request: MeasureRequest,
    *,
    on_event: Callable[[SupervisorEvent], None] | None = None,
    supervisor_options: Mapping[str, Any] | None = None,
    gpu_pids_check: Callable[[], set[int]] | None = None,
    cancel: threading.Event | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> Measured:
    """"Measure on this GPU" (see the module docstring). ``on_event`` hears the dry run's
    supervisor events, ``on_phase`` the user's words for each start-up phase it reaches
    (:func:`kvpilot.core.base.lifecycle.phase_words`); ``supervisor_options`` are extra keyword
    arguments for the Supervisor (timeouts; tests); ``gpu_pids_check`` lists the pids holding
    GPU memory for a stop that checks none is left; ``cancel`` set stops the dry run.

    Raises:
        MeasurementError: vLLM failed (with the classified kind), timed out or was cancelled.
        CommandError: a server an earlier kvpilot left still runs, or the spec cannot become a
            command.
    """
    from kvpilot.core.app.launch import LaunchSession
    from kvpilot.core.vllm.measure import run_measurement

    spec = dry_run_spec(request)
    on_event = _with_phases(on_event, on_phase)
    options = {k: v for k, v in (supervisor_options or {}).items() if k != "on_ready_capacity"}
    session = LaunchSession(
        request.runtime, request.data_dir, on_event=on_event, supervisor_options=options,
        gpu_pids_check=gpu_pids_check,
    )
    session.refuse_next_to_orphans(spec.port)
    return run_measurement(
        session.runtime, spec, session.store, request.timeout_s, data_dir=Path(session.data_dir),
        key=key_for(request.inputs), on_event=on_event, gpu_pids_check=gpu_pids_check,
        cancel=cancel, supervisor_options=options,
    )


def _with_phases(
    on_event: Callable[[SupervisorEvent], None] | None, on_phase: Callable[[str], None] | None
) -> Callable[[SupervisorEvent], None] | None:
    """One listener: ``on_phase`` told the words of each start-up phase, ``on_event`` every
    event."""
    if on_phase is None:
        return on_event
    from kvpilot.core.base.lifecycle import phase_words
    from kvpilot.core.vllm.logparse import PhaseEvent

    def both(ev: SupervisorEvent) -> None:
        if isinstance(ev, PhaseEvent):
            on_phase(phase_words(ev.phase))
        if on_event is not None:
            on_event(ev)

    return both
