"""A profile's fixed settings that have no input in the planner (a KV cache size in bytes, a
KV dtype the box shows under a shorter name) are planned with and saved as they are."""

from __future__ import annotations

from kvpilot.core.app import settings as st
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings

KV_BYTES = 2 << 30


def test_a_pinned_kv_size_and_dtype_survive_planning_and_saving(qtbot, store, make_window):
    pinned = ServingSettings(kv_cache_memory_bytes=KV_BYTES, kv_cache_dtype="fp8_e5m2",
                             block_size=32)
    profile = st.Profile(name="fixed kv", goal=Goal(context_tokens=8192, users=2), plan=pinned)
    store.save(st.Settings(profiles=(profile,), active_profile="fixed kv"))
    window = make_window()
    planner = window.planner
    assert planner.kv_dtype.currentData() == "fp8"
    request = planner.request()
    assert request.pinned.kv_cache_memory_bytes == KV_BYTES
    assert request.pinned.kv_cache_dtype == "fp8_e5m2"
    assert request.pinned.block_size == 32

    qtbot.waitUntil(lambda: any(r.inputs is not None for r in planner.rows), timeout=30_000)
    planned = [r.inputs for r in planner.rows if r.inputs is not None]
    assert all(i.kv_cache_memory_bytes == KV_BYTES for i in planned)
    assert all(i.kv_cache_dtype == "fp8_e5m2" for i in planned)

    # a goal edit in the window is saved with the pins it has no input for
    planner.users.setValue(3)
    qtbot.waitUntil(lambda: store.load().settings.active.goal.users == 3, timeout=10_000)
    saved = store.load().settings.active.plan
    assert saved.kv_cache_memory_bytes == KV_BYTES
    assert saved.kv_cache_dtype == "fp8_e5m2"
    assert saved.block_size == 32

    # choosing another KV dtype in the box replaces the pinned one
    planner.kv_dtype.setCurrentIndex(planner.kv_dtype.findData("auto"))
    assert planner.request().pinned.kv_cache_dtype == "auto"
    assert planner.request().pinned.kv_cache_memory_bytes == KV_BYTES
