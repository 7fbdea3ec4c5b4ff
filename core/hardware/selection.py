"""Which GPUs a plan, a launch and the telemetry use.

NVML numbers GPUs by PCI order, CUDA by speed unless told otherwise, and either order may change
between boots; a launch therefore names its GPUs by UUID in ``CUDA_VISIBLE_DEVICES``. The
functions here are pure: they pick from a :class:`~kvpilot.core.hardware.probe.ProbeResult`.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpilot.core.base.errors import HardwareError
from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult


def parse_gpu_indices(text: str) -> tuple[int, ...]:
    """``"0,1"`` -> ``(0, 1)``.

    Raises:
        HardwareError: not a comma-separated list of distinct non-negative integers.
    """
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    try:
        indices = tuple(int(p) for p in parts)
    except ValueError:
        raise HardwareError(
            f"--gpus takes GPU indices separated by commas, e.g. 0,1 (got {text!r})"
        ) from None
    if not indices or any(i < 0 for i in indices) or len(set(indices)) != len(indices):
        raise HardwareError(
            f"--gpus takes distinct GPU indices separated by commas, e.g. 0,1 (got {text!r})"
        )
    return indices


def select_gpus(result: ProbeResult, indices: Sequence[int]) -> tuple[GpuSnapshot, ...]:
    """The GPUs ``indices`` names, in that order.

    Raises:
        HardwareError: no GPU was read, an index NVML does not report, or a lost GPU.
    """
    if not result.ok:
        why = result.error.one_line() if result.error is not None else "no GPU found"
        raise HardwareError(f"no GPU to choose from: {why}")
    by_index = {g.index: g for g in result.gpus}
    chosen = []
    for i in indices:
        gpu = by_index.get(i)
        if gpu is None:
            have = ", ".join(str(g.index) for g in result.gpus)
            raise HardwareError(
                f"there is no GPU {i}: NVML reports {len(result.gpus)} ({have}); see `kvpilot gpu`"
            )
        if gpu.lost:
            raise HardwareError(f"GPU {i} does not answer (fallen off the bus?); pick another")
        chosen.append(gpu)
    return tuple(chosen)


def cuda_visible_devices(gpus: Sequence[GpuSnapshot]) -> str:
    """``CUDA_VISIBLE_DEVICES`` for ``gpus``: their UUIDs (the index where NVML gave none)."""
    return ",".join(g.uuid or str(g.index) for g in gpus)


def drives_display(gpu: GpuSnapshot) -> bool:
    """True when a monitor is attached or a desktop draws on the GPU."""
    return bool(gpu.display_active or gpu.display_attached)


def preferred_gpu(
    gpus: Sequence[GpuSnapshot], needed_bytes: int | None = None
) -> GpuSnapshot | None:
    """The card to run on when one is enough: one that does not drive the display (and has at
    least ``needed_bytes`` free) first, then the most free memory. None when ``gpus`` is empty.
    """
    usable = [g for g in gpus if not g.lost and g.memory_total_bytes]
    if not usable:
        return None

    def free(g: GpuSnapshot) -> int:
        return int(g.memory_free_bytes or 0)

    def key(g: GpuSnapshot) -> tuple[bool, bool, int, int]:
        enough = needed_bytes is None or free(g) >= needed_bytes
        return (enough, not drives_display(g), free(g), -g.index)

    return max(usable, key=key)


def describe_gpu(gpu: GpuSnapshot) -> str:
    """``0: RTX 4090, 22.2 GiB free (display)`` for a selector."""
    name = (gpu.name or "GPU").replace("NVIDIA ", "").replace("GeForce ", "")
    free = gpu.memory_free_bytes
    text = f"{gpu.index}: {name}"
    if free is not None:
        text += f", {free / 2**30:.1f} GiB free"
    if drives_display(gpu):
        text += " (display)"
    return text
