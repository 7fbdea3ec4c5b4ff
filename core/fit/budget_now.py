"""How much of the GPU a vLLM launch could request right now without failing its start-up check.

vLLM (V1 engine, ``request_memory`` in ``v1/worker/utils.py``) takes a snapshot of free device
memory after its own CUDA context exists and refuses to start when::

    free_memory < requested = ceil(total_memory * gpu_memory_utilization)

``total_memory`` and ``free_memory`` are what ``cudaMemGetInfo`` reports. So the largest usable
``gpu_memory_utilization`` is bounded by what other processes (a desktop, a browser) hold now,
plus what vLLM's own process takes before that snapshot, plus a little room for the desktop to
grow between our reading and vLLM's. Both allowances are explicit parameters:

* :data:`CUDA_CONTEXT_BYTES` — vLLM's CUDA context, cuBLAS handles and NCCL set-up exist before
  the check; about 0.3-0.5 GiB on an RTX 4090. We take 512 MiB, the top of that range.
* :data:`SAFETY_BYTES` — 128 MiB for other processes growing in the seconds before the check.

The reading comes in as a :class:`GpuMemoryNow`, a plain record of one GPU's memory (the
hardware room builds it from a probe: ``kvpilot.core.hardware.probe.memory_now``), so that
this module, like the rest of the fit engine, reads no device itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.units import GiB, MiB, gib_text

#: memory vLLM's own process holds before its free-memory check (CUDA context, cuBLAS, NCCL)
CUDA_CONTEXT_BYTES = 512 * MiB
#: room for other processes to grow between this reading and vLLM's check
SAFETY_BYTES = 128 * MiB
#: below this much used memory and with no process listed, a GPU counts as idle in messages
IDLE_BYTES = 64 * MiB
#: the default total allowance subtracted from free memory
DEFAULT_MARGIN_BYTES = CUDA_CONTEXT_BYTES + SAFETY_BYTES


def requested_bytes(total_bytes: int, utilization: float) -> int:
    """What vLLM requests for ``utilization``: ``ceil(total_bytes * utilization)``."""
    return math.ceil(total_bytes * utilization)


def passes_startup_check(total_bytes: int, free_bytes: int, utilization: float) -> bool:
    """vLLM's rule exactly: start-up succeeds when ``free_bytes >= ceil(total * utilization)``."""
    return free_bytes >= requested_bytes(total_bytes, utilization)


def max_startup_utilization(
    total_bytes: int, free_bytes: int, margin_bytes: int = DEFAULT_MARGIN_BYTES
) -> float:
    """The largest ``gpu_memory_utilization``, rounded DOWN to 0.01, that passes vLLM's check.

    Args:
        total_bytes: device total as CUDA counts it (see ``GpuSnapshot.cuda_total_bytes``).
        free_bytes: free device memory now, before vLLM starts.
        margin_bytes: subtracted from ``free_bytes`` first (vLLM's own context + safety).

    Returns:
        A value in [0.0, 1.0]; 0.0 means no utilization of at least 0.01 would start.

    Raises:
        FitError: ``total_bytes`` is not positive, or ``free_bytes``/``margin_bytes`` negative.
    """
    if total_bytes <= 0:
        raise FitError(f"GPU total memory must be positive, got {total_bytes} bytes")
    if free_bytes < 0 or margin_bytes < 0:
        raise FitError(
            f"free memory and margin must not be negative (free {free_bytes}, "
            f"margin {margin_bytes} bytes)"
        )
    usable = free_bytes - margin_bytes
    if usable <= 0:
        return 0.0
    hundredths = min(100, math.floor(usable * 100 / total_bytes))
    # float rounding of hundredths/100 could push ceil() one byte over: step down until it passes
    while hundredths > 0 and not passes_startup_check(total_bytes, usable, hundredths / 100):
        hundredths -= 1
    return hundredths / 100


@dataclass(frozen=True)
class GpuMemoryNow:
    """One GPU's memory at one moment, as the launch budget needs it (bytes).

    Attributes:
        gpu_index: the GPU's index.
        total_bytes: total memory as CUDA counts it (NVML total minus the reserved part);
            None when not read.
        free_bytes: free memory now; None when not read.
        holders: (process name, bytes) of the processes holding memory, largest first.
        process_count: processes listed on the GPU, with or without a memory figure.
        per_process_reported: False when the driver gives no per-process figures (WSL2),
            None when unknown.
        lost: the GPU stopped answering.
    """

    gpu_index: int
    total_bytes: int | None
    free_bytes: int | None
    holders: tuple[tuple[str, int], ...] = ()
    process_count: int = 0
    per_process_reported: bool | None = None
    lost: bool = False


def holders_phrase(holders: tuple[tuple[str, int], ...], limit: int = 3) -> str:
    """``"firefox (0.6 GiB), gnome-shell (0.4 GiB)"``: the largest ``limit`` holders."""
    return ", ".join(f"{name} ({used / GiB:.1f} GiB)" for name, used in holders[:limit])


@dataclass(frozen=True)
class LaunchBudget:
    """What a vLLM launch on one GPU could get right now (bytes; utilization as a fraction).

    ``others_bytes`` is device memory in use by anything else (the desktop, other programs);
    ``per_process_reported`` is False when the driver gives no per-process figures (WSL2), in
    which case only the device total of used memory is known.
    """

    gpu_index: int
    total_bytes: int
    free_bytes: int
    others_bytes: int
    margin_bytes: int
    max_utilization: float
    per_process_reported: bool | None
    message: str

    @property
    def requested_bytes(self) -> int:
        """What vLLM would request at :attr:`max_utilization`."""
        return requested_bytes(self.total_bytes, self.max_utilization)


def _gib(n: int) -> str:
    return gib_text(n, 1)


def launch_budget(
    gpu: GpuMemoryNow, margin_bytes: int = DEFAULT_MARGIN_BYTES
) -> LaunchBudget | None:
    """The :class:`LaunchBudget` of one GPU's reading, or None when its memory was not read.

    Raises:
        FitError: ``margin_bytes`` is negative.
    """
    total = gpu.total_bytes
    free = gpu.free_bytes
    if total is None or free is None or gpu.lost or total <= 0:
        return None
    others = max(0, total - free)
    util = max_startup_utilization(total, free, margin_bytes)
    reported = gpu.per_process_reported
    idle = not gpu.process_count and others < IDLE_BYTES
    holders = "nothing else holds memory" if idle else "other processes hold"
    note = "" if reported is not False else " (per-process use not reported by the driver)"
    if util <= 0:
        message = (
            f"only {_gib(free)} free ({holders} {_gib(others)}{note}): vLLM cannot start on "
            f"GPU {gpu.gpu_index}; close other GPU programs first"
        )
    elif idle:
        message = f"{_gib(free)} free: at most gpu_memory_utilization {util:.2f} will start"
    else:
        message = (
            f"{holders} {_gib(others)}{note}: at most gpu_memory_utilization {util:.2f} will start"
        )
    return LaunchBudget(
        gpu_index=gpu.gpu_index,
        total_bytes=total,
        free_bytes=free,
        others_bytes=others,
        margin_bytes=margin_bytes,
        max_utilization=util,
        per_process_reported=reported,
        message=message,
    )
