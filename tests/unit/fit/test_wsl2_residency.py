"""Under WSL2, memory Windows makes resident while vLLM loads is charged to vLLM's non-torch
memory (vllm/utils/mem_utils.py memory_profiling, 0.15.1 wheel): the band's lower edge allows
for it, so a tight plan is borderline there and fits on Linux."""

from __future__ import annotations

from dataclasses import replace

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.plan import VERDICT_BORDERLINE, VERDICT_FITS, PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import wsl2_residency
from kvpilot.core.fit.borderline import borderline_note
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.extensible_kv import DESKTOP_ROOM_FLOOR_BYTES

QWEN3_8B = fixture_spec("qwen3-8b", weights_bytes=int(15.26 * GiB))


def _plan(**kw: object) -> PlanInputs:
    values: dict[str, object] = {"vllm_version": "0.15.1", "max_model_len": 8192}
    values.update(kw)
    return rtx4090(QWEN3_8B, **values)


def test_the_room_is_what_others_hold_at_least_one_gib() -> None:
    assert wsl2_residency.room_bytes(_plan()) == 0  # Linux: nothing
    unread = _plan(gpu_under_wsl2=True)
    assert wsl2_residency.room_bytes(unread) == DESKTOP_ROOM_FLOOR_BYTES
    total = 24564 << 20
    busy = _plan(gpu_under_wsl2=True, gpu_free_bytes=total - 2 * GiB)
    assert wsl2_residency.room_bytes(busy) == 2 * GiB
    idle = _plan(gpu_under_wsl2=True, gpu_free_bytes=total - GiB // 4)
    assert wsl2_residency.room_bytes(idle) == DESKTOP_ROOM_FLOOR_BYTES
    # a KV cache of a given size is used as it is; the CPU backend has no WDDM
    assert wsl2_residency.room_bytes(replace(unread, kv_cache_memory_bytes=2 * GiB)) == 0
    assert wsl2_residency.room_bytes(replace(unread, gpu_name="cpu")) == 0


def test_a_tight_plan_fits_on_linux_and_is_borderline_under_wsl2() -> None:
    first = compute_capacity(_plan())
    low = first.available_kv_band_bytes[0]
    # a context whose one request needs half a GiB less than the band's lower edge
    tokens = int((low - GiB // 2) / first.kv_bytes_per_token) // 16 * 16
    linux = compute_capacity(_plan(max_model_len=tokens))
    assert linux.verdict == VERDICT_FITS
    wsl = compute_capacity(_plan(max_model_len=tokens, gpu_under_wsl2=True))
    assert wsl.verdict == VERDICT_BORDERLINE
    assert wsl.available_kv_bytes == linux.available_kv_bytes  # the estimate stays
    assert wsl.available_kv_band_bytes[0] == linux.available_kv_band_bytes[0] - GiB
    assert wsl.available_kv_band_bytes[1] == linux.available_kv_band_bytes[1]
    assert wsl.inputs["wsl2_residency_bytes"] == GiB
    assert "wsl2_residency_bytes" not in linux.inputs
    note = borderline_note(wsl)
    assert "1.00 GiB that Windows may make resident" in note and "WSL2" in note


def test_vllm_0_34_leaves_the_room_outside_through_its_launch_cap() -> None:
    linux = compute_capacity(_plan(vllm_version="0.34.0"))
    wsl = compute_capacity(_plan(vllm_version="0.34.0", gpu_under_wsl2=True))
    assert wsl.available_kv_band_bytes == linux.available_kv_band_bytes
    assert "wsl2_residency_bytes" not in wsl.inputs
