"""vLLM 0.34's extensible KV cache as kvpilot models it: the final size from the memory free at
launch (v1/worker/extensible_kv_cache.py measure_kv_cache_bytes in the 0.34.0 wheel) and the
cap kvpilot launches with on a desktop GPU."""

from __future__ import annotations

import pytest

from kvpilot.core.base.plan import GpuTarget
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import extensible_kv
from kvpilot.core.fit.budget_now import CUDA_CONTEXT_BYTES
from kvpilot.core.fit.recommend import utilization_for

#: the recorded rtx4090-desktop snapshot: CUDA total (NVML total less reserved) and free
TOTAL, FREE = 25_394_413_568, 23_783_800_832
HOLDERS = (("firefox", 840_957_952), ("Xorg", 432_013_312), ("gnome-shell", 299_892_736))


def test_final_budget_is_bound_by_the_device_until_a_cap_is_lower():
    resident, peak = 15 * GiB, GiB // 2
    device = extensible_kv.final_kv_budget(total_bytes=TOTAL, free_now_bytes=FREE,
                                           utilization=1.0, non_kv_bytes=resident,
                                           transient_peak_bytes=peak)
    init_free = FREE - CUDA_CONTEXT_BYTES
    assert device.bound == "device" and device.withheld_bytes == 0
    assert device.available_kv_bytes == init_free - resident - GiB - peak  # margin: the floor
    assert device.left_free_bytes == GiB  # the margin stays free
    capped = extensible_kv.final_kv_budget(total_bytes=TOTAL, free_now_bytes=FREE,
                                           utilization=0.8, non_kv_bytes=resident,
                                           transient_peak_bytes=peak)
    assert capped.bound == "utilization"
    assert capped.available_kv_bytes == -(-TOTAL * 8 // 10) - resident - peak
    assert capped.withheld_bytes == device.available_kv_bytes - capped.available_kv_bytes
    # planner mode: a GPU nothing else uses
    planner = extensible_kv.final_kv_budget(total_bytes=TOTAL, free_now_bytes=None,
                                            utilization=1.0, non_kv_bytes=resident,
                                            transient_peak_bytes=peak)
    assert planner.init_free_bytes == TOTAL - CUDA_CONTEXT_BYTES
    assert planner.free_source == extensible_kv.PLANNER_FREE_ASSUMPTION


def test_weights_peak_and_margin_over_the_free_memory_exceed_it():
    short = extensible_kv.final_kv_budget(total_bytes=TOTAL, free_now_bytes=15 * GiB,
                                          utilization=1.0, non_kv_bytes=14 * GiB,
                                          transient_peak_bytes=GiB // 2)
    assert short.exceeds_free and short.available_kv_bytes == 0
    assert short.shortfall_bytes == 14 * GiB + GiB // 2 + GiB - (15 * GiB - CUDA_CONTEXT_BYTES)


def test_desktop_gpu_gets_a_cap_that_leaves_the_desktop_room():
    cap = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL, free_now_bytes=FREE,
                                   drives_display=True, holders=HOLDERS)
    assert cap.capped and cap.others_bytes == TOTAL - FREE
    assert cap.headroom_bytes == max(GiB, TOTAL - FREE)
    # what vLLM may use after its context leaves the room and its non-torch reserve free
    requested = -(-TOTAL * int(cap.gpu_memory_utilization * 100) // 100)
    left = FREE - CUDA_CONTEXT_BYTES - requested
    assert cap.headroom_bytes + extensible_kv.NON_TORCH_RESERVE_BYTES <= left
    assert left - cap.headroom_bytes - extensible_kv.NON_TORCH_RESERVE_BYTES < TOTAL // 100
    assert "drives a display" in cap.reason and "firefox" in cap.reason


def test_dedicated_gpu_older_release_and_explicit_sizes_keep_vllms_default():
    idle = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL,
                                    free_now_bytes=TOTAL, drives_display=False)
    assert not idle.capped and "left unset" in idle.reason
    older = extensible_kv.launch_cap(vllm_version="0.33.0", total_bytes=TOTAL,
                                     free_now_bytes=FREE, drives_display=True, holders=HOLDERS)
    assert not older.capped
    off = extensible_kv.extension_off_reason("0.34.0", kv_cache_memory_bytes=4 * GiB)
    fixed = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL,
                                     free_now_bytes=FREE, drives_display=True, extension_off=off)
    assert not fixed.capped and "kv-cache-memory-bytes" in fixed.reason
    # another program alone (no display) is reason enough
    shared = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL,
                                      free_now_bytes=TOTAL - 3 * GiB, drives_display=False,
                                      holders=(("python", 3 * GiB),))
    assert shared.capped and shared.headroom_bytes == 3 * GiB
    assert "shared with other programs" in shared.reason


def test_headroom_warning_fires_under_the_room_only():
    cap = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL, free_now_bytes=FREE,
                                   drives_display=True, holders=HOLDERS)
    assert extensible_kv.headroom_warning(cap.headroom_bytes + 1, cap) is None
    assert extensible_kv.headroom_warning(None, cap) is None
    text = extensible_kv.headroom_warning(cap.headroom_bytes // 2, cap)
    assert text is not None and "lower --gpu-memory-utilization" in text
    unset = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL,
                                     free_now_bytes=TOTAL, drives_display=False)
    assert extensible_kv.headroom_warning(0, unset) is None


@pytest.mark.parametrize(("display", "free", "expected_capped"),
                         [(True, FREE, True), (False, TOTAL, False)])
def test_the_planner_plans_034_with_the_same_decision(display, free, expected_capped):
    gpu = GpuTarget("NVIDIA GeForce RTX 4090", TOTAL, free, (8, 9),
                    memory_holders=HOLDERS if display else (), drives_display=display)
    util = utilization_for(gpu, "0.34.0")
    assert (util is not None) == expected_capped
    cap = extensible_kv.launch_cap(vllm_version="0.34.0", total_bytes=TOTAL, free_now_bytes=free,
                                   drives_display=display, holders=gpu.memory_holders)
    assert util == cap.gpu_memory_utilization
    # 0.33 keeps the largest utilization that passes its start-up check
    assert utilization_for(gpu, "0.33.0") == utilization_for(gpu)
