"""``kvpilot serve`` and the window launch alike: for the same plan on the recorded
``rtx4090-desktop`` snapshot, the stand-in vLLM (tests/fakes/fake_vllm.py) is started with the
same arguments and the same environment from both faces; next to a server an earlier kvpilot
left running (a real orphan: a stand-in server whose kvpilot exited), both faces take the one
orphan policy's decision: refuse its port with the same words, launch beside it on another."""

from __future__ import annotations

import json
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from orphankit import make_orphan
from ports import free_port
from testpaths import DATA, TESTS

from kvpilot.core.app import settings as st
from kvpilot.core.base.goal import Goal
from kvpilot.core.cli import main
from kvpilot.core.hardware.proctree import alive
from kvpilot.core.runs.store import RunStore
from kvpilot.core.runtimes.discovery import discover
from kvpilot.core.vllm.command import find_free_port
from kvpilot.core.vllm.orphans import OrphanServer, find_orphans, stop_orphan

SNAPSHOT = "rtx4090-desktop"
VERSION = "0.32.0"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"
FAKE = TESTS / "fakes" / "fake_vllm.py"
#: the window checks the runtime's flags as the command line does (it learns the optional ones)
FAST = {"settle_s": 0.1, "health_interval_s": 0.1}


@pytest.fixture
def faces(
    make_window: Any, store: st.SettingsStore, qtbot: Any, isolated_dirs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """``launch(face, port)``: the stand-in's start-up (argv, environment) of a launch of the
    window's selected plan from that face (``"window"`` or ``"cli"``), or the refusal's words;
    both faces on the same desktop, data folder and plan. The stand-in fails as vLLM does when
    capturing graphs (nothing keeps running)."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", SNAPSHOT)
    monkeypatch.setenv("FAKE_VLLM_VERSION", VERSION)
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(DATA / "supervisor" / "cuda_oom_graph_capture.log"))
    started = isolated_dirs / "started.json"
    monkeypatch.setenv("FAKE_VLLM_ARGV_FILE", str(started))
    exe = isolated_dirs / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    profile = st.Profile(name="same", model_ref=str(MODEL),
                         goal=Goal(context_tokens=8192, users=4), sampling_hz=5.0)
    store.save(st.Settings(profiles=(profile,), active_profile="same"))
    w = make_window(SNAPSHOT, supervisor_options=dict(FAST))
    w.runtime_control.set_runtime(discover(str(exe), data_dir=isolated_dirs / "data"))
    qtbot.waitUntil(lambda: w.planner.selected() is not None
                    and w.planner.selected().inputs.vllm_version == VERSION, timeout=15_000)
    row = w.planner.selected()
    inputs = row.inputs

    def launch(
        face: str, port: int, capsys: pytest.CaptureFixture, *, auto: bool = False
    ) -> dict[str, Any] | str:
        """``auto``: the fallbacks are walked by themselves (the profile's policy, the
        command line's ``--auto-fallback``) until none is left."""
        started.unlink(missing_ok=True)
        if face == "window":
            w.settings = st.update_profile(w.settings, replace(w.profile, port=port,
                                                               auto_fallback=auto))
            assert w.server_control.launch_plan(w.planner.selected())
            # the stand-in's failure (a server event) or a refusal before any launch (none);
            # with the policy, the banner once no fallback is left to take
            qtbot.waitUntil(lambda: w.server_panel.state == "failed" and (
                not auto or (w.banner.isVisible() and not w.fallback_control.proposing)),
                timeout=60_000)
            if not started.exists():  # refused before the launch
                return w.statusBar().currentMessage()
        else:
            status = main([
                "serve", "--model", str(MODEL), "--vllm", str(exe),
                "--data-dir", str(isolated_dirs / "data"), "--port", str(port),
                "--max-model-len", str(inputs.max_model_len),
                "--max-num-seqs", str(inputs.max_num_seqs),
                "--kv-cache-dtype", inputs.kv_cache_dtype,
                *(["--auto-fallback"] if auto else []),
            ])
            err = capsys.readouterr().err
            if status == 2:
                (error,) = [line for line in err.splitlines() if "error:" in line]
                return error.removeprefix("kvpilot: error: ")
            assert status == 1, err  # the stand-in's failure
        return json.loads(started.read_text())

    return launch


def test_the_same_plan_starts_vllm_with_the_same_command_and_environment(
    faces: Any, capsys: pytest.CaptureFixture
) -> None:
    port = free_port(19620)
    window = faces("window", port, capsys)
    cli = faces("cli", port, capsys)
    assert isinstance(window, dict) and isinstance(cli, dict)
    print("launched by both faces:", " ".join(window["argv"]))
    assert window["argv"] == cli["argv"]
    assert window["argv"][window["argv"].index("--port") + 1] == str(port)
    assert "--gpu-memory-utilization" in window["argv"]  # chosen by the application layer
    assert window["env"] == cli["env"]
    assert window["env"]["CUDA_VISIBLE_DEVICES"].startswith("GPU-")  # pinned by UUID


def test_the_automatic_fallbacks_walk_the_same_launches_from_both_faces(
    faces: Any, capsys: pytest.CaptureFixture, isolated_dirs: Path
) -> None:
    """Every launch fails as vLLM does when capturing CUDA graphs: the profile's policy in the
    window and ``--auto-fallback`` relaunch the same configurations in the same order, each
    once, and stop at the same place."""
    port = free_port(19630)
    faces("window", port, capsys, auto=True)
    faces("cli", port, capsys, auto=True)
    runs = RunStore(isolated_dirs / "data").records().records

    def walked(source: str) -> list[tuple[Any, ...]]:
        """The face's launches in order: the first, then "automatic fallback 1", 2, ..."""
        order = [(int(r.fallbacks[0].rsplit(" ", 1)[1]) if r.fallbacks else 0,
                  tuple(sorted(r.settings.items())), r.extra_args, r.failure_kind)
                 for r in runs if r.source == source]
        return sorted(order)

    window, cli = walked("gui"), walked("cli")
    print(f"{len(window)} launches from each face; the last: {dict(window[-1][1])}")
    assert [n for n, *_ in window] == list(range(len(window))) and len(window) > 2
    assert window == cli
    assert len({item[1:3] for item in window}) == len(window)  # never the same launch twice


def test_next_to_an_orphan_both_faces_take_the_same_decision(
    faces: Any, capsys: pytest.CaptureFixture, isolated_dirs: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = free_port(19640)
    with monkeypatch.context() as env:  # the orphan itself serves (no failure, no recording)
        for name in ("FAKE_VLLM_MODE", "FAKE_VLLM_LOG", "FAKE_VLLM_ARGV_FILE"):
            env.delenv(name)
        tree = make_orphan(isolated_dirs / "data", held)
    (orphan,) = find_orphans(isolated_dirs / "data")
    try:
        _decide_next_to(orphan, tree, held, faces, capsys, isolated_dirs)
    finally:
        stop_orphan(orphan)


def _decide_next_to(
    orphan: OrphanServer, tree: set[int], held: int, faces: Any,
    capsys: pytest.CaptureFixture, isolated_dirs: Path,
) -> None:
    # its port: refused by both, naming the orphan alike, each face with its own way out
    window = faces("window", held, capsys)
    cli = faces("cli", held, capsys)
    assert isinstance(window, str) and isinstance(cli, str)
    print(f"window: {window}\ncli:    {cli}")
    said = (f"port {held} belongs to a vLLM server an earlier kvpilot left running "
            f"(pid {orphan.record.pid}, {orphan.record.model}); ")
    assert window.startswith(said) and cli.startswith(said)
    assert "--stop-orphans" in cli and "--stop-orphans" not in window
    # another port: both launch beside it, on that port, with the same command
    beside = find_free_port("127.0.0.1", held + 1)
    window_beside = faces("window", beside, capsys)
    cli_beside = faces("cli", beside, capsys)
    assert isinstance(window_beside, dict) and isinstance(cli_beside, dict)
    assert window_beside["argv"] == cli_beside["argv"]
    assert window_beside["argv"][window_beside["argv"].index("--port") + 1] == str(beside)
    assert alive(tree) == tree  # neither face stopped it
    assert [o.record.pid for o in find_orphans(isolated_dirs / "data")] == [orphan.record.pid]
