"""The Front tab: start a front from the window, see the profiles' states, the queue and the
swaps, the dashboard following the server that answers, and a stop that leaves no process.

The profiles run on the stand-in vLLM (tests/fakes/fake_vllm.py), planned as two profiles that
fit on the recorded RTX 4090 together."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
from PySide6.QtCore import Qt

from kvpilot.core.app import front as app_front
from kvpilot.core.app.launch import LaunchSession
from kvpilot.core.app.settings import Profile
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.base.units import GiB
from kvpilot.core.front.members import Member
from kvpilot.core.front.placement import ProfileNeed
from kvpilot.core.front.pool import FrontOptions, Pool
from kvpilot.core.front.server import FrontServer
from kvpilot.core.hardware.target import from_spec
from kvpilot.core.runtimes.discovery import VllmRuntime

FAKE = Path(__file__).resolve().parents[2] / "fakes" / "fake_vllm.py"


def _fake_front(request: app_front.FrontRequest, data: Path) -> FrontServer:
    runtime = VllmRuntime((sys.executable, str(FAKE)), "0.33.0", "env", str(FAKE))
    card = from_spec("RTX 4090")
    assert card is not None
    members = []
    for name in request.profiles:
        profile = Profile(name=name, model_ref=f"/models/{name}", served_model_name=name,
                          plan=ServingSettings(max_model_len=1024, max_num_seqs=4))
        members.append(app_front.profile_member(
            profile, runtime, card, need=ProfileNeed(name, 4 * GiB, 6 * GiB, GiB // 2)))

    def session(member: Member) -> LaunchSession:
        return LaunchSession(runtime, data, run_profile=member.name, run_source="front",
                             supervisor_options={"check_flags": False, "settle_s": 0.1})

    pool = Pool(members, data, request.options, session_factory=session)
    return FrontServer(pool, request.host, request.port, api_key=request.api_key)


def test_front_tab_starts_follows_and_stops(qtbot, make_window, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_VLLM_LINE_DELAY_S", "0.002")
    built: list[app_front.FrontRequest] = []

    def build(request: app_front.FrontRequest) -> FrontServer:
        built.append(request)
        return _fake_front(request, tmp_path / "front-data")

    monkeypatch.setattr(app_front, "build_front", build)
    window = make_window()
    panel, control = window.front_panel, window.front_control
    try:
        _drive(qtbot, window, panel, control, built)
    finally:
        control.shutdown()  # a failed assertion leaves no stand-in server running


def _drive(qtbot, window, panel, control, built) -> None:
    window.tabs.setCurrentWidget(panel)
    panel.set_profiles(["a", "b"], ("a", "b"))
    from ports import free_port

    port = free_port(19600)
    panel.port.setValue(port)
    panel.idle.setValue(0)
    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: control.front is not None and control.front.started, timeout=20_000)
    assert built[0].profiles == ("a", "b") and built[0].options == FrontOptions()
    assert panel.button.text() == "Stop front"
    assert panel.address.text() == f"http://127.0.0.1:{port}/v1"

    reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=30,
                       json={"model": "b", "prompt": "hi"})
    assert reply.json()["choices"][0]["text"] == "from b"

    def row(profile: str) -> list[str]:
        for r in range(panel.table.rowCount()):
            if panel.table.item(r, 0).text() == profile:
                return [panel.table.item(r, c).text() for c in range(panel.table.columnCount())]
        return []

    qtbot.waitUntil(lambda: row("b")[2:3] == ["loaded"], timeout=5000)
    util = int(6 * GiB / control.front.pool.total_bytes * 1000) / 1000  # as passed to vLLM
    assert row("a")[2] == "stopped" and row("b")[4] == f"6.00 GiB ({util:.3f})"
    assert panel.swaps.count() == 1 and "start b" in panel.swaps.item(0).text()
    assert "0 request(s) waiting" in panel.queue.text()
    assert "fit on the card together" in panel.plan.text()
    # the dashboard follows the server that answered
    slot = control.front.pool.slots["b"]
    qtbot.waitUntil(lambda: control.following == slot.base_url, timeout=5000)
    assert window.services.metrics_sampler is not None
    pid = slot.supervisor.pid

    qtbot.mouseClick(panel.button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: control.front is None, timeout=60_000)
    assert panel.button.text() == "Start front" and window.services.metrics_sampler is None
    time.sleep(0.2)
    assert not psutil.pid_exists(pid)
