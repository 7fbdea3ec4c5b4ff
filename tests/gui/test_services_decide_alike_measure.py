"""``kvpilot plan --measure`` and the window's "Measure on this GPU" store the same measurement
for the same plan: one dry run (dummy weights, a free port, refusal next to a server an earlier
kvpilot left) under one key. vLLM is the stand-in (tests/fakes/fake_vllm.py) replaying a real
start-up log, on the recorded ``rtx4090-desktop`` GPU."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from testpaths import DATA, TESTS

from kvpilot.core.app.settings import Profile
from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.lifecycle import PHASE_WORDS
from kvpilot.core.cli import main
from kvpilot.core.runtimes.discovery import VllmRuntime, discover
from kvpilot.core.vllm.orphans import ServerRecord, write_pidfile
from kvpilot.gui.records import PlanRequest, PlanRow
from kvpilot.gui.services import AppServices, LaunchRequest

SNAPSHOT = "rtx4090-desktop"
VLLM_VERSION = "0.11.0"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"
FAKE = TESTS / "fakes" / "fake_vllm.py"
#: what a measurement holds that is not the plan's: when it was made and how long it took
OF_THE_MOMENT = ("measured_at", "startup_s")


@pytest.fixture
def vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", SNAPSHOT)
    monkeypatch.setenv("FAKE_VLLM_VERSION", VLLM_VERSION)
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


@pytest.fixture
def window(vllm: Path, tmp_path: Path, make_services) -> AppServices:
    return make_services(SNAPSHOT, tmp_path / "window")


def _row(services: AppServices) -> PlanRow:
    target = services.target_from_selection(services.probe(), (0,))
    goal = Goal(context_tokens=8192, users=4, vllm_version=VLLM_VERSION)
    rows = services.plan(target, PlanRequest(goal, model_ref=str(MODEL))).rows
    assert rows and rows[0].fits and rows[0].inputs is not None
    return rows[0]


def _window_measure(services: AppServices, runtime: VllmRuntime, row: PlanRow) -> None:
    assert row.inputs is not None
    request = LaunchRequest(inputs=row.inputs, model=row.model_ref, profile=Profile(name="p"))
    services.measure_plan(runtime, request, threading.Event(), timeout_s=60)


def _cli_measure(vllm: Path, row: PlanRow, data: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    assert row.inputs is not None
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(data))
    return main(["plan", "--model", str(MODEL), "--measure", "--vllm", str(vllm),
                 "--max-model-len", str(row.inputs.max_model_len),
                 "--max-num-seqs", str(row.inputs.max_num_seqs),
                 "--kv-cache-dtype", row.inputs.kv_cache_dtype, "--measure-timeout", "60"])


def _entries(path: Path) -> list[dict]:
    entries: list[dict] = json.loads(path.read_text())["entries"]
    for e in entries:
        for name in OF_THE_MOMENT:
            e["measured"].pop(name)
    return entries


def test_the_cli_and_the_window_store_the_same_measurement(
    window: AppServices, vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, qtbot
) -> None:
    row = _row(window)
    phases: list[str] = []
    window.bridge.measure_phase.connect(phases.append)
    _window_measure(window, discover(str(vllm)), row)
    qtbot.waitUntil(lambda: bool(phases), timeout=5000)
    # the window hears the dry run's start-up phases in the user's words, in vLLM's order
    assert phases and set(phases) <= set(PHASE_WORDS.values())
    assert phases == sorted(phases, key=list(PHASE_WORDS.values()).index)
    assert _cli_measure(vllm, row, tmp_path / "cli", monkeypatch) == 0
    (windows,) = _entries(tmp_path / "window" / "measurements.json")
    (clis,) = _entries(tmp_path / "cli" / "measurements.json")
    assert windows == clis
    assert windows["measured"]["source"] == "dry_run"
    assert windows["measured"]["kv_cache_tokens"] > 0
    # the window's next plan of that goal reads it ("measured"), as kvpilot plan does
    assert _row(window).capacity.inputs["kv_source"] == "measured"  # type: ignore[union-attr]


@pytest.fixture
def left_over() -> Iterator[ServerRecord]:
    """A process standing in for a server whose kvpilot is gone (its owner has exited)."""
    owner = subprocess.Popen([sys.executable, "-c", "pass"])
    owner_created = psutil.Process(owner.pid).create_time()
    owner.wait(timeout=30)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              start_new_session=True)
    try:
        yield ServerRecord(
            pid=server.pid, pgid=server.pid, port=8000, host="127.0.0.1", model="left/over",
            served_model_name="left/over", started_at=time.time(), log_path="",
            argv=("vllm", "serve", "left/over"),
            create_time=psutil.Process(server.pid).create_time(), owner_pid=owner.pid,
            owner_create_time=owner_created, vllm_version=VLLM_VERSION)
    finally:
        server.kill()
        server.wait(timeout=30)


def test_neither_face_measures_beside_a_server_an_earlier_kvpilot_left(
    window: AppServices, vllm: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    left_over: ServerRecord, capsys: pytest.CaptureFixture,
) -> None:
    row = _row(window)
    for data in (tmp_path / "window", tmp_path / "cli"):
        write_pidfile(data, left_over)
    with pytest.raises(CommandError) as refused:
        _window_measure(window, discover(str(vllm)), row)
    assert "earlier kvpilot left running" in refused.value.message
    assert _cli_measure(vllm, row, tmp_path / "cli", monkeypatch) != 0
    assert f"kvpilot: error: {refused.value.message}" in capsys.readouterr().err
    assert not (tmp_path / "window" / "measurements.json").exists()
    assert not (tmp_path / "cli" / "measurements.json").exists()
