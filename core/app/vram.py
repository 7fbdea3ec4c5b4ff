"""Where a GPU's memory is: other processes, the driver, vLLM's weights, overhead and KV, free.

One reading of one GPU (a probe's :class:`~kvpilot.core.hardware.probe.GpuSnapshot` or a
sampler's :class:`~kvpilot.core.hardware.sampler.GpuSample`) is split into byte segments that add
up to the card's total. While a server runs, vLLM's processes hold the weights, KV cache and
overhead (activation peak, CUDA graphs, non-torch memory) in the sizes vLLM reported; without a
server, a selected plan is placed inside the free memory ("planned"). Pure arithmetic: no I/O.
The window's memory bar draws what :func:`split_vram` says.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from kvpilot.core.base.plan import Capacity

#: parts smaller than this would read "0.0 GiB": unattributed memory below it is left out of the
#: split and a legend leaves such parts out
MIN_SHOWN_BYTES = 48 << 20
#: the name of used memory no process accounts for (contexts, WSL2, other namespaces)
UNATTRIBUTED = "other (unattributed)"


class GpuMemoryReading(Protocol):
    """One reading of a GPU's memory (bytes; None: not reported): a probe's ``GpuSnapshot``
    (its ``processes`` carry pid, name and bytes) or a sampler's ``GpuSample`` (its
    ``process_used_bytes`` maps pid -> bytes). The fit engine reads no device itself."""

    @property
    def memory_total_bytes(self) -> int | None: ...

    @property
    def memory_used_bytes(self) -> int | None: ...

    @property
    def memory_free_bytes(self) -> int | None: ...

    @property
    def memory_reserved_bytes(self) -> int | None: ...


class ReportedMemory(Protocol):
    """What a running server reported about its memory (bytes; None until vLLM printed it)."""

    @property
    def weights_bytes(self) -> int | None: ...

    @property
    def available_kv_bytes(self) -> int | None: ...


@dataclass(frozen=True)
class VramSplit:
    """One GPU's memory in bytes, segment by segment.

    The segments add up to ``total_bytes`` (NVML's total = used + free + reserved), less any
    unattributed memory below :data:`MIN_SHOWN_BYTES`.

    ``other_bytes`` is (process name, bytes) per other program, largest first, with
    :data:`UNATTRIBUTED` for used memory no process accounts for; ``activation_bytes`` is the
    activation peak, CUDA graphs and non-torch memory. ``planned`` is True when vLLM's parts are
    a plan drawn in the free memory rather than a running server's.
    """

    total_bytes: int
    other_bytes: tuple[tuple[str, int], ...]
    reserved_bytes: int
    weights_bytes: int
    activation_bytes: int
    kv_bytes: int
    free_bytes: int
    planned: bool

    @property
    def vllm_bytes(self) -> int:
        """Weights + activation/graphs + KV: what vLLM holds (or the plan needs)."""
        return self.weights_bytes + self.activation_bytes + self.kv_bytes


def process_bytes(gpu: GpuMemoryReading) -> dict[int, int | None]:
    """pid -> bytes the process holds on ``gpu`` (None: the driver does not say, as on WSL2)."""
    procs = getattr(gpu, "processes", None)
    if procs is not None:
        return {p.pid: p.used_bytes for p in procs}
    return dict(getattr(gpu, "process_used_bytes", {}) or {})


def short_process_name(name: str | None, pid: int) -> str:
    """The program's file name (``/usr/lib/xorg/Xorg`` -> ``Xorg``), else ``pid N``."""
    name = name or ""
    if "/" in name:
        name = name.rsplit("/", 1)[-1]
    return name or f"pid {pid}"


def split_vram(
    gpu: GpuMemoryReading,
    vllm_pids: Collection[int] = (),
    capacity: Capacity | ReportedMemory | None = None,
    names: Mapping[int, str] | None = None,
) -> VramSplit | None:
    """Split one reading of a GPU's memory into segments.

    Args:
        gpu: a probe snapshot or a sampler sample.
        vllm_pids: the running server's process ids (empty: no server runs).
        capacity: with a server, what it reported (or the plan's :class:`Capacity` until it
            reports); without one, the selected plan's :class:`Capacity` (drawn as planned).
            A reported capacity without a server is ignored.
        names: pid -> process name (a sample has none; a snapshot's processes add theirs).

    Returns:
        The split, or None when the reading has no total memory.

    When the driver reports no per-process memory (WSL2) vLLM's share of the used memory is
    the plan's requested bytes (all of the unattributed memory without a plan).
    """
    total = gpu.memory_total_bytes
    if not total:
        return None
    known = dict(names or {})
    for proc in getattr(gpu, "processes", ()) or ():
        known.setdefault(proc.pid, proc.name or "")
    used = gpu.memory_used_bytes or 0
    free = gpu.memory_free_bytes if gpu.memory_free_bytes is not None else max(0, total - used)
    reserved = gpu.memory_reserved_bytes or 0
    others: dict[str, int] = {}
    vllm_used = 0
    attributed = 0
    for pid, n in process_bytes(gpu).items():
        if n is None:
            continue
        attributed += n
        if pid in vllm_pids:
            vllm_used += n
        else:
            key = short_process_name(known.get(pid), pid)
            others[key] = others.get(key, 0) + n
    rest = max(0, used - attributed)
    weights = activation = kv = 0
    running = bool(vllm_pids)
    if running:
        if vllm_used == 0 and rest > 0 and capacity is not None:
            requested = capacity.requested_bytes if isinstance(capacity, Capacity) else 0
            vllm_used = min(rest, requested or rest)
            rest -= vllm_used
        w_bytes = capacity.weights_bytes if capacity is not None else None
        kv_bytes = capacity.available_kv_bytes if capacity is not None else None
        if w_bytes is not None or kv_bytes is not None:
            weights = min(vllm_used, w_bytes or 0)
            kv = min(vllm_used - weights, max(0, kv_bytes or 0))
            activation = vllm_used - weights - kv
        else:
            activation = vllm_used
    if rest >= MIN_SHOWN_BYTES:
        others[UNATTRIBUTED] = others.get(UNATTRIBUTED, 0) + rest
    planned = False
    if not running and isinstance(capacity, Capacity):
        planned = True
        plan_weights, plan_activation, plan_kv = plan_bytes(capacity)
        weights = min(free, plan_weights)
        activation = min(free - weights, plan_activation)
        kv = min(free - weights - activation, plan_kv)
        free = free - weights - activation - kv
    ordered = tuple(sorted(others.items(), key=lambda item: -item[1]))
    return VramSplit(total, ordered, reserved, weights, activation, kv, free, planned)


def plan_bytes(capacity: Capacity) -> tuple[int, int, int]:
    """What a plan places on the card, in bytes: (weights, activation peak with the vision
    encoder, CUDA graphs and non-torch memory, KV cache); the planner's bar of a plan and the
    memory bar's "planned" segments both draw them."""
    # the budget module (and the hardware it imports) only once there is a plan to draw
    from kvpilot.core.fit.budget import overhead_bytes

    return capacity.weights_bytes, overhead_bytes(capacity), max(0, capacity.available_kv_bytes)
