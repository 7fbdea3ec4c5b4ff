"""The measured dry run: start a plan with random weights, read what vLLM reports, stop.

``--load-format dummy`` skips the download and the weight reads but allocates exactly the same
memory (weights, activation profile, CUDA graphs, KV cache), so the numbers vLLM prints are the
real ones for that GPU, model, version and settings. They are stored in a
:class:`~kvpilot.core.measurements.MeasurementStore` under a
:class:`~kvpilot.core.measurements.MeasurementKey`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from kvpilot.core.errors import KvpilotError
from kvpilot.core.measurements import (
    SOURCE_DRY_RUN,
    Measured,
    MeasurementKey,
    MeasurementStore,
    measured_from_reported,
    measurement_key,
)
from kvpilot.core.vllm.supervisor import (
    Supervisor,
    SupervisorEvent,
)

if TYPE_CHECKING:
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.runtime import VllmRuntime


class MeasurementError(KvpilotError):
    """The dry run did not produce capacity numbers (vLLM failed or timed out).

    ``kind`` is the classified failure kind (``kvpilot.core.failures``) when there was one.
    """

    def __init__(self, message: str, *, kind: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind


def cpu_device_identity() -> tuple[str, int]:
    """``("cpu", total RAM bytes)``: the device key for vLLM's CPU backend."""
    return "cpu", int(psutil.virtual_memory().total)


def key_for(
    spec: LaunchSpec,
    *,
    gpu_name: str,
    gpu_total_bytes: int,
    vllm_version: str,
    weights_bytes: int | None = None,
    model_id: str | None = None,
) -> MeasurementKey:
    """The measurement key of ``spec`` on a device (a ``--load-format`` does not change it).

    The model is keyed by its identity (a snapshot folder of the Hugging Face cache counts as
    its repo id); ``model_id`` overrides it.
    """
    return measurement_key(
        gpu_name=gpu_name,
        gpu_total_bytes=gpu_total_bytes,
        model=model_id or spec.model,
        vllm_version=vllm_version,
        settings=spec,
        weights_bytes=weights_bytes,
    )


def run_measurement(
    runtime: VllmRuntime,
    spec: LaunchSpec,
    store: MeasurementStore,
    timeout_s: float,
    *,
    data_dir: Path | None = None,
    key: MeasurementKey | None = None,
    on_event: Callable[[SupervisorEvent], None] | None = None,
    gpu_pids_check: Callable[[], set[int]] | None = None,
) -> Measured:
    """Launch ``spec`` with dummy weights, wait for the capacity numbers, stop, store them.

    ``key`` defaults to :func:`key_for` on the CPU device identity (pass the GPU's name and
    total bytes on a GPU machine). ``data_dir`` defaults to the store's folder.

    Raises:
        MeasurementError: vLLM failed to start (with the classified ``kind``) or was not ready
            within ``timeout_s``; the server is stopped in every case.
        CommandError: the spec cannot become a command.
    """
    dry = dataclasses.replace(spec, load_format="dummy")
    if key is None:
        name, total = cpu_device_identity()
        key = key_for(spec, gpu_name=name, gpu_total_bytes=total, vllm_version=runtime.version)
    sup = Supervisor(
        runtime,
        dry,
        data_dir=data_dir or store.path.parent,
        on_event=on_event,
        gpu_pids_check=gpu_pids_check,
    )
    started = time.monotonic()
    sup.start()
    try:
        ready = sup.wait_ready(timeout_s)
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
