"""The command line and the window decide alike on the recorded ``rtx4090-desktop`` snapshot:
with no utilization given, ``kvpilot plan``, ``kvpilot serve`` and the window's planner use the
one the application layer chooses (the most that passes vLLM's start-up check with the memory
this desktop has free), say so once, and give the same verdict; ``export`` writes the same text
from both faces."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port
from testpaths import DATA, TESTS

from kvpilot.core.app.launch_settings import choose_utilization
from kvpilot.core.app.settings import Profile
from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.cli import build_parser, main
from kvpilot.core.commands.plan import inputs_from_args
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest, PlanRow
from kvpilot.gui.services import AppServices

SNAPSHOT = "rtx4090-desktop"
VLLM_VERSION = "0.11.0"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"
FAKE = TESTS / "fakes" / "fake_vllm.py"


#: the end-to-end tests' tiny Llama (tests/e2e/make_tiny_model.py builds it with weights; the
#: plan needs its config only)
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "dtype": "float32",
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 2048, "vocab_size": 1024, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-06, "hidden_act": "silu",
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}


@pytest.fixture
def desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppServices:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", SNAPSHOT)
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))
    services = AppServices(CoreBridge(), fake_gpu=SNAPSHOT, data_dir=tmp_path)
    yield services
    services.shutdown()


def _window_row(
    services: AppServices, context: int, users: int, model: Path = MODEL
) -> tuple[PlanRow, str]:
    result = services.probe()
    target = services.target_from_selection(result, (0,))
    request = PlanRequest(Goal(context_tokens=context, users=users, vllm_version=VLLM_VERSION),
                          model_ref=str(model))
    planned = services.plan(target, request)
    rows = [r for r in planned.rows if r.inputs is not None and r.capacity is not None]
    assert rows, planned.heading
    return rows[0], planned.heading


@pytest.mark.parametrize(("model", "context", "users"), [
    ("qwen", 8192, 4), ("qwen", 32768, 1), ("qwen", 65536, 4), ("tiny", 2048, 4),
])
def test_plan_without_a_utilization_picks_the_windows_and_gives_its_verdict(
    desktop: AppServices, capsys: pytest.CaptureFixture, tmp_path: Path, model: str,
    context: int, users: int
) -> None:
    path = MODEL if model == "qwen" else _tiny(tmp_path)
    row, heading = _window_row(desktop, context, users, path)
    assert row.inputs is not None and row.capacity is not None
    window_util = row.capacity.gpu_memory_utilization
    # the desktop holds about 1.5 GiB: vLLM's 0.92 would not pass, the window plans with less
    assert window_util == 0.91
    assert "utilization 0.91 chosen automatically" in heading
    argv = ["plan", "--model", str(path), "--max-model-len", str(row.inputs.max_model_len),
            "--max-num-seqs", str(row.inputs.max_num_seqs), "--vllm-version", VLLM_VERSION,
            "--kv-cache-dtype", row.inputs.kv_cache_dtype]
    status = main([*argv, "--json"])
    cli = json.loads(capsys.readouterr().out)
    assert cli["gpu_memory_utilization"] == window_util
    assert cli["utilization_choice"]["automatic"] is True
    assert cli["verdict"] == row.capacity.to_json()["verdict"]
    assert status == (0 if row.capacity.fits else 1)
    main(argv)
    text = capsys.readouterr().out
    assert text.count("chosen automatically") == 1


def _tiny(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-llama"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    return folder


@pytest.mark.parametrize("model", ["qwen", "tiny"])
def test_serve_without_a_utilization_launches_with_the_windows_and_says_so_once(
    desktop: AppServices, tmp_path: Path, model: str
) -> None:
    path = MODEL if model == "qwen" else _tiny(tmp_path)
    row, _ = _window_row(desktop, 2048, 4, path)
    assert row.capacity is not None
    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    argv_file = tmp_path / "argv.json"
    env = dict(os.environ, FAKE_VLLM_VERSION=VLLM_VERSION, FAKE_VLLM_MODE="fail",
               FAKE_VLLM_LOG=str(DATA / "supervisor" / "cuda_oom_graph_capture.log"),
               FAKE_VLLM_ARGV_FILE=str(argv_file), KVPILOT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "serve", "--model", str(path),
         "--vllm", str(exe), "--data-dir", str(tmp_path / "data"), "--max-model-len", "2048",
         "--max-num-seqs", "4", "--port", str(free_port(19800))],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    said = proc.stdout + proc.stderr
    assert said.count("utilization 0.91 chosen automatically") == 1, (proc.returncode, said)
    launched = json.loads(argv_file.read_text())["argv"]
    assert row.capacity.gpu_memory_utilization == 0.91  # the window's, for the same goal
    assert launched[launched.index("--gpu-memory-utilization") + 1] == "0.91", launched
    assert "not launched" not in said
    # the stand-in then fails as vLLM does when capturing graphs: that is said once too
    assert said.count("vLLM failed (cuda_oom_graphs)") == 1, said


def test_a_refusal_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A utilization the user fixed above what the desktop leaves free: refused before the
    launch, with vLLM's way out named once (it was printed on stdout and again on stderr)."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", SNAPSHOT)
    exe = tmp_path / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "serve", "--model", str(MODEL),
         "--vllm", str(exe), "--data-dir", str(tmp_path / "data"), "--max-model-len", "8192",
         "--gpu-memory-utilization", "0.95", "--port", str(free_port(19810))],
        capture_output=True, text=True, timeout=120, check=False,
        env=dict(os.environ, FAKE_VLLM_VERSION=VLLM_VERSION,
                 KVPILOT_CACHE_DIR=str(tmp_path / "cache")),
    )
    said = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert said.count("at most --gpu-memory-utilization 0.91 would start") == 1, said


def test_the_application_layer_keeps_what_the_user_gave(desktop: AppServices) -> None:
    result = desktop.probe()
    target = desktop.target_from_selection(result, (0,))
    given = choose_utilization(target, ServingSettings(gpu_memory_utilization=0.8))
    assert (given.utilization, given.automatic, given.sentence) == (0.8, False, "")
    sized = choose_utilization(target, ServingSettings(kv_cache_memory_bytes=2**30))
    assert sized.utilization is None and not sized.automatic


@pytest.mark.parametrize("fmt", ["command", "docker", "compose", "helm"])
def test_window_and_cli_export_the_same_text(
    desktop: AppServices, capsys: pytest.CaptureFixture, fmt: str
) -> None:
    """One export function: the calibrated capacity and the plan's pipeline size, both faces,
    in every format (the command, docker run, a compose service, Helm values)."""
    row, _ = _window_row(desktop, 8192, 4)
    assert row.inputs is not None
    profile = Profile(name="default")
    argv = ["export", "--model", str(MODEL), "--max-model-len", str(row.inputs.max_model_len),
            "--max-num-seqs", str(row.inputs.max_num_seqs), "--vllm-version", VLLM_VERSION,
            "--kv-cache-dtype", row.inputs.kv_cache_dtype, "--format", fmt]
    if fmt == "helm":  # a cluster cannot pull a local folder: both faces refuse in one sentence
        with pytest.raises(CommandError) as refused:
            desktop.export_text(row.inputs, str(MODEL), profile, fmt)
        assert main(argv) == 2
        assert str(refused.value) in capsys.readouterr().err
        return
    window = desktop.export_text(row.inputs, str(MODEL), profile, fmt)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out == window
    assert "0.91" in window and "gpu-memory-utilization" in window
    assert captured.err.count("chosen automatically") == 1
    args = build_parser("export").parse_args(argv)
    assert inputs_from_args(args).gpu_memory_utilization == row.inputs.gpu_memory_utilization
    assert LaunchSpec.from_plan(row.inputs, str(MODEL)).gpu_memory_utilization == 0.91
