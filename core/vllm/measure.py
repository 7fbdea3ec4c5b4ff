"""The measured dry run: start a plan with random weights, read what vLLM reports, stop.

``--load-format dummy`` skips the download and the weight reads but allocates exactly the same
memory (weights, activation profile, CUDA graphs, KV cache), so the numbers vLLM prints are the
real ones for that GPU, model, version and settings. They are stored in a
:class:`~kvpilot.core.fit.measurements.MeasurementStore` under a
:class:`~kvpilot.core.fit.measurements.MeasurementKey`.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import MEASUREMENT_CANCELLED, MeasurementError
from kvpilot.core.fit.measurements import (
    SOURCE_DRY_RUN,
    Measured,
    MeasurementKey,
    MeasurementStore,
    measured_from_reported,
)
from kvpilot.core.vllm.supervisor import (
    FAILED,
    READY,
    STOPPED,
    Supervisor,
    SupervisorEvent,
)

if TYPE_CHECKING:
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.vllm.command import LaunchSpec


def run_measurement(
    runtime: VllmRuntime,
    spec: LaunchSpec,
    store: MeasurementStore,
    timeout_s: float,
    *,
    data_dir: Path | None = None,
    key: MeasurementKey,
    on_event: Callable[[SupervisorEvent], None] | None = None,
    gpu_pids_check: Callable[[], set[int]] | None = None,
    cancel: threading.Event | None = None,
    supervisor_options: Mapping[str, Any] | None = None,
) -> Measured:
    """Launch ``spec`` with dummy weights, wait for the capacity numbers, stop, store them.

    ``key`` is the plan's measurement key (:func:`kvpilot.core.fit.calibrate.key_for`, the one
    every planner looks up). ``data_dir`` defaults to the store's folder.

    ``cancel`` set stops the dry run (MeasurementError with kind ``cancelled``);
    ``supervisor_options`` are extra keyword arguments for the Supervisor.

    Raises:
        MeasurementError: vLLM failed to start (with the classified ``kind``), was not ready
            within ``timeout_s`` or was cancelled; the server is stopped in every case.
        CommandError: the spec cannot become a command.
    """
    dry = dataclasses.replace(spec, load_format="dummy")
    sup = Supervisor(
        runtime,
        dry,
        data_dir=data_dir or store.path.parent,
        on_event=on_event,
        gpu_pids_check=gpu_pids_check,
        **dict(supervisor_options or {}),
    )
    started = time.monotonic()
    sup.start()
    try:
        ready = _wait_ready(sup, started + timeout_s, cancel)
        if not ready:
            failure = sup.failure
            if failure is not None:
                raise MeasurementError(f"the dry run failed: {failure.message}", kind=failure.kind)
            raise MeasurementError(
                f"the dry run was not ready within {timeout_s:.0f} s; raise the timeout"
            )
        cap = sup.wait_capacity(10.0)
        startup = None if sup.ready_monotonic_s is None else sup.ready_monotonic_s - started
    finally:
        sup.stop()
    if cap.kv_cache_tokens is None:
        raise MeasurementError("vLLM reached ready but reported no KV cache size")
    measured = measured_from_reported(cap, SOURCE_DRY_RUN, startup_s=startup)
    store.record(key, measured)
    return measured


def _wait_ready(sup: Supervisor, deadline: float, cancel: threading.Event | None) -> bool:
    """True once ``sup`` is ready; False at a terminal state or the deadline (monotonic s).

    Raises:
        MeasurementError: ``cancel`` was set (kind ``cancelled``).
    """
    while True:
        if cancel is not None and cancel.is_set():
            raise MeasurementError("the dry run was cancelled", kind=MEASUREMENT_CANCELLED)
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        state = sup.wait_for((READY, FAILED, STOPPED), min(0.25, left))
        if state == READY:
            return True
        if state in (FAILED, STOPPED):
            return False
