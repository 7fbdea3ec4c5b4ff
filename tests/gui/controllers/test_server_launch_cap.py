"""The window with vLLM 0.34 on the recorded desktop GPU: the planner's plan carries the cap
that leaves the desktop room, the launch passes it, says why and arms the dashboard's warning.

The stand-in ``vllm`` (tests/fakes/fake_vllm.py) reports 0.34.0 and fails with 0.34's
all-memory hint (composed from the 0.34.0 wheel's _more_kv_cache_memory_hint template).
"""

from __future__ import annotations

import sys
from pathlib import Path

from guikit import wait_for_state
from ports import free_port
from testpaths import TESTS

from kvpilot.core.fit.extensible_kv import launch_cap
from kvpilot.core.runtimes.discovery import VllmRuntime

FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"
FAST = {"check_flags": False, "settle_s": 0.1, "health_interval_s": 0.1}
NO_KV_034 = (
    "(EngineCore pid=4188) ERROR 12-06 10:41:07 [core.py:1510] ValueError: No available memory "
    "for the cache blocks. The extensible KV cache already takes all device memory left after "
    "the model and its activations; decrease `max_model_len` or `max_num_seqs`, or the model "
    "needs a device with more memory."
)


def test_034_on_the_desktop_gpu_launches_capped_and_says_why(
        make_window, qtbot, monkeypatch, tmp_path: Path) -> None:
    from dataclasses import replace

    from kvpilot.core.app import launch
    from kvpilot.core.app import settings as st

    monkeypatch.setattr(launch, "launchable_spec", lambda spec, **_: spec)
    log = tmp_path / "fail.log"
    log.write_text(NO_KV_034 + "\n")
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    w = make_window(supervisor_options=dict(FAST))
    w.settings = st.update_profile(
        w.settings, replace(w.profile, port=free_port(19450)))
    w.runtime_control.set_runtime(
        VllmRuntime((sys.executable, str(FAKE_VLLM)), "0.34.0", "env", str(FAKE_VLLM)))
    qtbot.waitUntil(lambda: (w.planner.selected() is not None
                             and w.planner.selected().inputs.vllm_version == "0.34.0"),
                    timeout=15_000)
    inputs = w.planner.selected().inputs
    cap = launch_cap(vllm_version="0.34.0", total_bytes=inputs.gpu_total_bytes,
                     free_now_bytes=inputs.gpu_free_bytes, drives_display=True,
                     holders=inputs.gpu_memory_holders)
    assert cap.capped and inputs.gpu_memory_utilization == cap.gpu_memory_utilization
    messages: list[str] = []
    monkeypatch.setattr(w, "say", lambda text, _timeout_ms=0: messages.append(text))
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "failed", timeout=30_000)
    armed = w.services.telemetry.launch_cap
    assert armed is not None and armed.headroom_bytes == cap.headroom_bytes
    assert any("leave nothing for them to grow" in m for m in messages), messages
    failure = w.fallback_control.last_failure
    assert failure is not None and "raise" not in failure.message
