"""The kvpilot GUI process killed with SIGKILL while its server runs.

A real kvpilot window (offscreen, its own process, a recorded RTX 4090) launches the stand-in
vLLM (tests/fakes/fake_vllm.py, a real process tree serving /health and /metrics) and is then
SIGKILLed. The server lives on in its own session. The next window must find it and offer to
keep or stop it, refuse to start a second server while it runs (on its port or anywhere on the
GPU it holds), and once it is adopted keep its telemetry and say that its old log stream is
gone; closing the window then stops it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from guikit import wait_for_state
from ports import free_port

from kvpilot.core.app import settings as st
from kvpilot.core.hardware.proctree import alive
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.orphans import find_orphans

TESTS = Path(__file__).resolve().parents[1]
FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"

#: the first kvpilot: the real window and services, launching the selected plan
FIRST_GUI = r"""
import json, os, sys, time
from dataclasses import replace
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6.QtCore import QCoreApplication
from kvpilot.core.app import settings as st
from kvpilot.core.app import launch
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.gui import app as gui_app
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.services import AppServices

fake, config_dir, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
launch.launchable_spec = lambda spec, **_: spec  # catalog plans need no weights here
app = gui_app.ensure_app()
services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop")
services.supervisor_options = {"check_flags": False, "settle_s": 0.1, "health_interval_s": 0.1}
window = gui_app.build_window(store=st.SettingsStore(config_dir), services=services)
window.show()

def pump(until, seconds=60.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QCoreApplication.processEvents()
        if until():
            return
        time.sleep(0.01)
    raise SystemExit("timed out")

pump(lambda: gui_app.loaded(window))
window.settings = st.update_profile(window.settings, replace(window.profile, port=port,
                                                             sampling_hz=5.0))
window.runtime_control.set_runtime(VllmRuntime((sys.executable, fake), "0.32.0", "env", fake))
pump(lambda: window.planner.selected() is not None
     and window.planner.selected().inputs.vllm_version == "0.32.0")
window.server_control.launch_selected()
pump(lambda: services.supervisor is not None and services.supervisor.state == "ready")
pump(lambda: services.metrics_sampler is not None and services.metrics_sampler.samples_ok >= 2)
sup = services.supervisor
print(json.dumps({"tree": sorted(sup.tree_pids()), "log": str(sup.log_path),
                  "model": sup.model_name}), flush=True)
pump(lambda: False, 3600)  # until the test kills this process
"""


def test_a_sigkilled_gui_leaves_an_orphan_the_next_window_offers_and_never_doubles(
    make_window, qtbot, isolated_dirs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvpilot.core.app import launch

    monkeypatch.setattr(launch, "launchable_spec", lambda spec, **_: spec)
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    port = free_port(19850)
    first = subprocess.Popen(
        [sys.executable, "-c", FIRST_GUI, str(FAKE_VLLM), str(isolated_dirs / "config"),
         str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    tree: set[int] = set()
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line, first.communicate(timeout=30)
        started = json.loads(line)
        tree = set(started["tree"])
        assert len(tree) >= 2 and alive(tree) == tree  # API server + its child

        first.kill()  # SIGKILL: no clean-up of any kind runs in the first kvpilot
        first.wait(10)
        t0 = time.monotonic()
        time.sleep(0.5)
        assert alive(tree) == tree  # the server outlives its kvpilot (own session)

        w = make_window(supervisor_options={"check_flags": False, "settle_s": 0.1,
                                            "health_interval_s": 0.1})
        qtbot.waitUntil(lambda: w.orphan_bar.isVisible(), timeout=10_000)
        found_s = time.monotonic() - t0
        print(f"the next window offers the orphan {found_s:.2f} s after the kill: "
              f"{w.orphan_label.text()}")
        assert f"127.0.0.1:{port}" in w.orphan_label.text()
        assert w.orphan_adopt.isEnabled() and w.orphan_stop.isEnabled()

        # a launch while the orphan runs is refused: never a second server on its port / GPU
        w.settings = st.update_profile(w.settings, replace(w.profile, port=port,
                                                           sampling_hz=5.0))
        w.runtime_control.set_runtime(VllmRuntime((sys.executable, str(FAKE_VLLM)), "0.32.0", "env",
                                  str(FAKE_VLLM)))
        qtbot.waitUntil(
            lambda: w.planner.selected() is not None
            and w.planner.selected().inputs.vllm_version == "0.32.0",
            timeout=15_000,
        )
        w.server_control.launch_selected()
        qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=15_000)
        refusal = w.statusBar().currentMessage()
        print(f"a launch next to the orphan: {refusal}")
        assert "an earlier kvpilot left running" in refusal and f"port {port}" in refusal
        assert w.services.supervisor is None  # nothing was started
        orphans = find_orphans(isolated_dirs / "data")
        assert len(orphans) == 1 and orphans[0].record.port == port
        assert alive(tree) == tree

        # adopted: telemetry goes on and the log view says the old stream is gone
        assert w.orphan_control.adopt_orphan()
        wait_for_state(qtbot, w, "ready", timeout=30_000)
        assert w.server_panel.endpoint.text() == f"http://127.0.0.1:{port}/v1"
        qtbot.waitUntil(
            lambda: "old log stream has ended" in w.log_view.visible_text(), timeout=5000
        )
        assert started["log"] in w.log_view.visible_text()  # where the earlier lines are
        qtbot.waitUntil(lambda: w.dashboard.point_count("kv") >= 2, timeout=15_000)
        w.close()
        qtbot.waitUntil(lambda: not w.isVisible(), timeout=30_000)
        qtbot.waitUntil(lambda: not alive(tree), timeout=30_000)
        assert find_orphans(isolated_dirs / "data") == []
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
        for pipe in (first.stdout, first.stderr):
            if pipe is not None:
                pipe.close()
        for pid in alive(tree):
            os.kill(pid, signal.SIGKILL)
