"""vLLM 0.34's extensible KV cache: the final cache is sized from the memory free at launch.

From 0.34.0 the KV cache on CUDA is reserved as an address range and committed after warm-up
and CUDA-graph capture, from the memory really free then (every name below is a file and
function of the 0.34.0 wheel, path inside the ``vllm`` package)::

    non_kv_used = init_free - free_after_warmup - committed       (weights, non-torch, graphs)
    margin      = max(1 GiB, 0.75 x P)                             (P: the transient peak)
    kv          = min(requested - non_kv_used,
                      free_after_warmup + committed - margin) - P
    requested   = ceil(total x resolved utilization)               (1.0 when unset)

``v1/worker/extensible_kv_cache.py measure_kv_cache_bytes`` computes ``kv``;
``v1/core/kv_cache_planning.py finalize_extensible_kv_cache`` takes the block count it gives
and logs "GPU KV cache size". ``init_free`` is vLLM's snapshot after its CUDA context exists
(``v1/worker/gpu_worker.py`` ``init_snapshot``), so memory other processes hold is taken out of
the cache instead of failing the start: ``v1/worker/utils.py request_memory`` skips the
"Free memory on device ... is less than desired GPU memory utilization" check, and
``v1/worker/gpu/model_runner.py profile_cudagraph_memory`` returns 0 (no graph estimate; the
captured pool is simply no longer free). The torch allocator is then capped to leave
``KV_CACHE_NON_TORCH_RESERVE_BYTES`` (0.5 GiB) free; that reserve is part of the margin, not
taken again.

Memory other processes take *after* vLLM measured is not protected; vLLM's docstring of
``CacheConfig.gpu_memory_utilization`` (config/cache.py) asks for a utilization exactly when
other processes share the GPU "including ones that allocate after vLLM has started". A GPU
that drives a desktop is that case: :func:`launch_cap` chooses the cap kvpilot launches with.

Pure arithmetic on bytes: no device is read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.base.versions import Release, supports
from kvpilot.core.fit import budget_now

#: v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES on CUDA (3 GiB on ROCm)
MARGIN_FLOOR_BYTES = 1 * GiB
#: v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FRACTION
MARGIN_FRACTION = 0.75
#: v1/worker/extensible_kv_cache.py KV_CACHE_NON_TORCH_RESERVE_BYTES on CUDA (1 GiB on ROCm):
#: left free by capping torch's allocator (set_per_process_memory_fraction); inside the margin
NON_TORCH_RESERVE_BYTES = 512 * MiB

#: where each term of a 0.34 plan comes from (file and function of the 0.34.0 wheel)
SOURCE_FORMULA = "v1/worker/extensible_kv_cache.py measure_kv_cache_bytes"
SOURCE_FINAL = "v1/core/kv_cache_planning.py finalize_extensible_kv_cache"
SOURCE_MARGIN = ("v1/worker/extensible_kv_cache.py KV_CACHE_MARGIN_FLOOR_BYTES / "
                 "KV_CACHE_MARGIN_FRACTION")
SOURCE_PEAK = ("v1/worker/gpu_worker.py initialize_from_config: reserved_headroom_bytes = "
               "peak_activation_memory, kept free by measure_kv_cache_bytes")
SOURCE_RESERVE = ("v1/worker/extensible_kv_cache.py measure_kv_cache_blocks: torch capped "
                  "to leave KV_CACHE_NON_TORCH_RESERVE_BYTES free")
SOURCE_INIT_FREE = "v1/worker/gpu_worker.py init_snapshot (after vLLM's CUDA context)"
SOURCE_UTILIZATION = "config/cache.py CacheConfig.resolved_gpu_memory_utilization"
SOURCE_NO_GRAPH_ESTIMATE = ("v1/worker/gpu/model_runner.py profile_cudagraph_memory returns 0 "
                            "with the extensible KV cache")

#: what the planner assumes is free at launch when no reading exists (``--gpu`` with no
#: ``--gpu-free-mib``): a GPU nothing else uses
PLANNER_FREE_ASSUMPTION = "no free-memory reading: a GPU nothing else uses is assumed"

#: the least room a desktop GPU keeps for the desktop to grow into (see :func:`launch_cap`)
DESKTOP_ROOM_FLOOR_BYTES = 1 * GiB


def desktop_room_bytes(others_bytes: int) -> int:
    """The memory (bytes) the desktop and other programs holding ``others_bytes`` now may grow
    by: as much again as they hold, at least :data:`DESKTOP_ROOM_FLOOR_BYTES`."""
    return max(DESKTOP_ROOM_FLOOR_BYTES, others_bytes)


def extension_off_reason(
    vllm_version: str | Release | None,
    *,
    is_cpu: bool = False,
    kv_cache_memory_bytes: int | None = None,
    num_gpu_blocks_override: int | None = None,
    kv_connector: str | None = None,
    vmm_supported: bool | None = None,
) -> str | None:
    """Why vLLM leaves the extensible KV cache off for these settings (None: it is on).

    Follows ``config/vllm.py VllmConfig._resolve_extensible_kv_cache`` (0.34.0): off before
    0.34, off the CUDA / ROCm platforms, with ``--kv-cache-memory-bytes`` or
    ``--num-gpu-blocks-override``, with a KV connector (kvpilot does not know which connectors
    keep it: any named one counts as off), and off when the driver lacks virtual memory
    management (``v1/engine/core.py extensible_kv_cache_unsupported_reason``;
    ``vmm_supported`` None: not known, assumed present as on any CUDA 12+ driver).
    """
    if not supports("extensible_kv_cache", vllm_version):
        return "vLLM before 0.34 has no extensible KV cache"
    if is_cpu:
        return "the extensible KV cache is only supported on CUDA and ROCm"
    if kv_cache_memory_bytes is not None:
        return "--kv-cache-memory-bytes fixes the KV cache size (no extension)"
    if num_gpu_blocks_override is not None:
        return "--num-gpu-blocks-override fixes the block count (no extension)"
    if kv_connector:
        return f"the KV connector {kv_connector} may keep the KV cache in its own memory"
    if vmm_supported is False:
        return "the driver lacks CUDA virtual memory management"
    return None


def measure_kv_cache_bytes(
    *,
    init_free_bytes: int,
    free_bytes: int,
    committed_bytes: int,
    requested_bytes: int,
    transient_peak_bytes: int = 0,
    torch_reserve_growth_bytes: int = 0,
) -> int:
    """Bytes the KV cache may occupy, as 0.34's ``measure_kv_cache_bytes`` computes them.

    ``init_free_bytes`` is free memory at vLLM's start-up snapshot, ``free_bytes`` after
    warm-up and graph capture (torch's cache emptied), ``committed_bytes`` the part of the KV
    cache committed during warm-up, ``requested_bytes`` ``ceil(total x utilization)``. Never
    negative.
    """
    non_kv_used = init_free_bytes - free_bytes - committed_bytes
    headroom = free_bytes + committed_bytes
    margin = margin_bytes(transient_peak_bytes)
    available = min(requested_bytes - non_kv_used, headroom - margin)
    available -= max(transient_peak_bytes, torch_reserve_growth_bytes)
    return max(available, 0)


def margin_bytes(transient_peak_bytes: int) -> int:
    """``max(KV_CACHE_MARGIN_FLOOR_BYTES, int(P x KV_CACHE_MARGIN_FRACTION))`` (bytes)."""
    return max(MARGIN_FLOOR_BYTES, int(transient_peak_bytes * MARGIN_FRACTION))


def launch_free_bytes(total_bytes: int, free_now_bytes: int | None) -> tuple[int, str]:
    """(free memory at vLLM's start-up snapshot, where the figure came from).

    The snapshot is taken after vLLM's own CUDA context exists, so kvpilot's allowance for it
    (:data:`~kvpilot.core.fit.budget_now.CUDA_CONTEXT_BYTES`) comes off the reading; without a
    reading the planner assumes a GPU nothing else uses (:data:`PLANNER_FREE_ASSUMPTION`).
    """
    ctx = budget_now.CUDA_CONTEXT_BYTES
    if free_now_bytes is None:
        return max(0, total_bytes - ctx), PLANNER_FREE_ASSUMPTION
    return max(0, free_now_bytes - ctx), "free memory now (NVML), less vLLM's CUDA context"


@dataclass(frozen=True)
class ExtensibleKvBudget:
    """The final KV size of a 0.34 launch with the extensible cache on (bytes per GPU).

    Attributes:
        init_free_bytes: free memory at vLLM's start-up snapshot.
        free_source: where ``init_free_bytes`` came from (a reading or the planner's
            assumption).
        requested_bytes: ``ceil(total x resolved utilization)``: only a cap now.
        non_kv_bytes: what stays resident besides the KV cache (weights, non-torch memory,
            the captured CUDA-graph pool).
        transient_peak_bytes: P, kept free for activations.
        margin_bytes: ``max(1 GiB, 0.75 x P)``.
        available_kv_bytes: the final KV cache (never negative).
        bound: ``"device"`` when the free memory decides, ``"utilization"`` when the cap does.
        withheld_bytes: KV the utilization cap keeps out of the cache (0 when the device
            binds).
    """

    init_free_bytes: int
    free_source: str
    requested_bytes: int
    non_kv_bytes: int
    transient_peak_bytes: int
    margin_bytes: int
    available_kv_bytes: int
    bound: str
    withheld_bytes: int

    @property
    def shortfall_bytes(self) -> int:
        """How far weights, overheads, peak and margin exceed the free memory (0: they fit)."""
        need = self.non_kv_bytes + self.transient_peak_bytes + self.margin_bytes
        return max(0, need - self.init_free_bytes)

    @property
    def exceeds_free(self) -> bool:
        """True when weights + overheads + peak + margin are more than is free: vLLM 0.34
        cannot size any KV cache ("No available memory for the cache blocks")."""
        return self.shortfall_bytes > 0 or self.available_kv_bytes <= 0

    @property
    def left_free_bytes(self) -> int:
        """Memory the launch leaves free once the cache is final (bytes): the margin and
        whatever the cap withholds; the transient peak comes and goes."""
        used = self.non_kv_bytes + self.available_kv_bytes + self.transient_peak_bytes
        return max(0, self.init_free_bytes - used)


def final_kv_budget(
    *,
    total_bytes: int,
    free_now_bytes: int | None,
    utilization: float,
    non_kv_bytes: int,
    transient_peak_bytes: int,
) -> ExtensibleKvBudget:
    """The final KV cache 0.34 sizes for a launch (see the module docstring), bytes per GPU.

    ``free_now_bytes`` is NVML's free memory before launch (None: planner mode);
    ``utilization`` the resolved one (1.0 when unset); ``non_kv_bytes`` weights + non-torch +
    the captured graph pool; ``transient_peak_bytes`` the activation peak.
    """
    init_free, source = launch_free_bytes(total_bytes, free_now_bytes)
    requested = math.ceil(total_bytes * utilization)
    after_warmup = init_free - non_kv_bytes  # committed = 0: the formula does not depend on it
    kv = measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=after_warmup, committed_bytes=0,
        requested_bytes=requested, transient_peak_bytes=transient_peak_bytes,
    )
    device_only = measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=after_warmup, committed_bytes=0,
        requested_bytes=max(requested, init_free), transient_peak_bytes=transient_peak_bytes,
    )
    withheld = max(0, device_only - kv)
    return ExtensibleKvBudget(
        init_free_bytes=init_free,
        free_source=source,
        requested_bytes=requested,
        non_kv_bytes=non_kv_bytes,
        transient_peak_bytes=transient_peak_bytes,
        margin_bytes=margin_bytes(transient_peak_bytes),
        available_kv_bytes=kv,
        bound="utilization" if withheld else "device",
        withheld_bytes=withheld,
    )


# ------------------------------------------------------------------ the desktop's cap
@dataclass(frozen=True)
class LaunchCap:
    """How kvpilot launches 0.34 on one GPU: with a utilization cap or vLLM's own default.

    Attributes:
        gpu_memory_utilization: the cap to pass (None: leave it unset, vLLM's default).
        headroom_bytes: memory the cap leaves free for other processes to grow into (0 when
            unset); the dashboard warns while serving when free memory falls under it.
        others_bytes: what other processes held when the cap was chosen.
        reason: one sentence: the cap, the room it leaves and why.
    """

    gpu_memory_utilization: float | None
    headroom_bytes: int
    others_bytes: int
    reason: str

    @property
    def capped(self) -> bool:
        """True when the launch passes a utilization."""
        return self.gpu_memory_utilization is not None


def launch_cap(
    *,
    vllm_version: str | Release | None,
    total_bytes: int,
    free_now_bytes: int | None,
    drives_display: bool,
    holders: tuple[tuple[str, int], ...] = (),
    extension_off: str | None = None,
) -> LaunchCap:
    """The utilization kvpilot launches vLLM 0.34 with on this GPU (bytes; one decision for
    the CLI and the window).

    With the extensible KV cache vLLM takes every byte free at launch (less its margin and
    peak), so a desktop that grows afterwards (Xorg, the compositor, a browser) finds nothing
    left. When the card drives a display or other processes hold memory, the cap leaves room
    for them to grow: as much again as they hold now, at least
    :data:`DESKTOP_ROOM_FLOOR_BYTES`, plus vLLM's own
    :data:`NON_TORCH_RESERVE_BYTES`, so that free memory while serving stays at or above
    ``headroom_bytes`` until the others grow into it. A GPU with neither keeps vLLM's
    default (utilization unset); so do releases before 0.34, a launch with the extension off
    (``extension_off``: :func:`extension_off_reason`) and a GPU whose free memory was not read.
    """
    if not supports("extensible_kv_cache", vllm_version) or extension_off is not None:
        why = extension_off or "vLLM before 0.34 sizes the KV cache from its utilization"
        return LaunchCap(None, 0, 0, f"vLLM's default utilization: {why}.")
    if free_now_bytes is None:
        return LaunchCap(None, 0, 0, "vLLM's default utilization (unset, 1.0 with the "
                         "extensible KV cache): the GPU's free memory was not read.")
    others = max(0, total_bytes - free_now_bytes)
    busy = drives_display or bool(holders) or others >= budget_now.IDLE_BYTES
    if not busy:
        return LaunchCap(None, 0, others, (
            "utilization left unset (vLLM's default, 1.0 with the extensible KV cache): "
            "nothing else uses this GPU, so the KV cache may take all the memory free at "
            "launch."))
    room = desktop_room_bytes(others)
    usable = free_now_bytes - budget_now.CUDA_CONTEXT_BYTES - room - NON_TORCH_RESERVE_BYTES
    hundredths = max(1, math.floor(usable * 100 / total_bytes)) if usable > 0 else 1
    util = min(hundredths, 99) / 100
    who = "drives a display" if drives_display else "is shared with other programs"
    held = f"{others / GiB:.2f} GiB" + (
        f" ({budget_now.holders_phrase(holders)})" if holders else "")
    return LaunchCap(util, room, others, (
        f"--gpu-memory-utilization {util:.2f}: this GPU {who} and others hold {held}; vLLM "
        f"0.34 would size its KV cache into all memory free at launch and leave nothing for "
        f"them to grow, so {room / GiB:.2f} GiB stays free for them (as much again as they "
        "hold, at least 1 GiB)."))


def headroom_warning(free_bytes: int | None, cap: LaunchCap) -> str | None:
    """A sentence for the dashboard while serving when free memory fell under the room the
    cap left (None: no cap, no reading, or still enough room)."""
    if not cap.capped or free_bytes is None or free_bytes >= cap.headroom_bytes:
        return None
    return (
        f"only {free_bytes / GiB:.2f} GiB of GPU memory is free, under the "
        f"{cap.headroom_bytes / GiB:.2f} GiB kvpilot left for other programs to grow into: "
        "they have taken most of it, and once vLLM's next activation peak finds no memory "
        "the server fails; close some, or relaunch with a lower --gpu-memory-utilization."
    )
