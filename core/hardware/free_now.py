"""The free memory of the GPUs a launch uses, read right before it starts.

A desktop's use of the GPU changes between planning and launching, so every launch reads it
again (vLLM's start-up check is made against the memory free at that moment). ``kvpilot serve``
and the window read it the same way: NVML over the GPUs the server runs on (several GPUs: the
smallest's, as the plan has it), and the processes holding memory, the launching kvpilot's own
server left out (it is about to be replaced, its memory is not someone else's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvpilot.core.base.errors import FitError, HardwareError

if TYPE_CHECKING:
    from kvpilot.core.hardware.target import DeviceTarget

#: (free bytes, holders as (process name, bytes), largest first)
FreeMemory = tuple[int, tuple[tuple[str, int], ...]]
#: what a launch calls to read :data:`FreeMemory` again; None when nothing can be read
FreeMemoryReader = Callable[[], FreeMemory | None]


def read_free_memory(
    indices: Sequence[int],
    *,
    nvml_module: object | None = None,
    exclude_pids: frozenset[int] = frozenset(),
) -> FreeMemory | None:
    """Blocking (one NVML pass): the free bytes of GPUs ``indices`` now (several: the
    smallest card's per-rank reading) and the processes holding memory on them, those in
    ``exclude_pids`` left out. None when NVML reads no GPU, an index is gone, or the driver
    reports no free memory (a reading that cannot be made does not stop a launch).
    """
    from kvpilot.core.hardware import target
    from kvpilot.core.hardware.probe import memory_holders, probe

    try:
        result = probe(nvml_module)
        if not result.ok or not result.gpus:
            return None
        device = target.from_probe(result, tuple(indices) or None)
    except (HardwareError, FitError):
        return None
    if device.free_bytes is None:
        return None
    used = set(device.gpu_indices)
    holders = [h for g in result.gpus if g.index in used
               for h in memory_holders(g, exclude_pids=exclude_pids)]
    return int(device.free_bytes), tuple(sorted(holders, key=lambda h: -h[1]))


def free_memory_reader(
    device: DeviceTarget,
    *,
    nvml_module: object | None = None,
    own_pids: Callable[[], frozenset[int]] | None = None,
) -> FreeMemoryReader | None:
    """What a launch calls to read ``device``'s free memory again (:func:`read_free_memory`
    over its GPUs, ``own_pids()`` left out); None when the device was not read from this
    machine (a GPU named for planning) or is the CPU backend."""
    if not device.detected or device.is_cpu:
        return None
    indices = device.gpu_indices

    def read() -> FreeMemory | None:
        own = own_pids() if own_pids is not None else frozenset()
        return read_free_memory(indices, nvml_module=nvml_module, exclude_pids=own)

    return read
