"""The command line and the window plan through the same core: for every recorded NVML snapshot
and a few models and settings, ``kvpilot plan`` and the window's planner give the same capacity
and the same measurement key, and a measurement stored under one is shown by the other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fitkit import cli_flags

from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import FROM_MEASURED, PlanInputs, ServingSettings
from kvpilot.core.base.units import GiB
from kvpilot.core.cli import build_parser, main
from kvpilot.core.commands.plan import inputs_from_args
from kvpilot.core.fit.calibrate import key_for
from kvpilot.core.fit.measurements import Measured, MeasurementStore
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest, PlanRow
from kvpilot.gui.services import AppServices

#: every recorded snapshot with a GPU kvpilot ships (``--fake-gpu NAME``)
SNAPSHOTS = ("rtx4090-desktop", "rtx4090-wsl2", "rtx3090-idle", "rtx4080", "rtx5090",
             "rtx4090-rtx3090")
#: (catalog id, context, users, KV dtype, utilization)
GOALS = (
    ("Qwen/Qwen2.5-7B-Instruct", 32768, 1, "auto", None),
    ("Qwen/Qwen3-8B", 8192, 4, "fp8", None),
    ("meta-llama/Llama-3.1-8B-Instruct", 16384, 2, "auto", 0.85),
)
VLLM_VERSION = "0.11.0"


def _cli_argv(row: PlanRow, inputs: PlanInputs) -> list[str]:
    return ["plan", "--model", row.model_ref, *cli_flags(inputs)]


def _window_rows(services: AppServices, goal: PlanRequest) -> list[PlanRow]:
    result = services.probe()
    target = services.target_from_selection(result, tuple(g.index for g in result.gpus))
    return [r for r in services.plan(target, goal).rows if r.inputs is not None and r.fits]


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
def test_cli_and_window_give_one_capacity_and_one_key(
    snapshot: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", snapshot)
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))
    services = AppServices(CoreBridge(), fake_gpu=snapshot, data_dir=tmp_path)
    compared = 0
    try:
        for model, context, users, kv_dtype, utilization in GOALS:
            goal = PlanRequest(
                Goal(context_tokens=context, users=users, vllm_version=VLLM_VERSION),
                ServingSettings(kv_cache_dtype=kv_dtype, gpu_memory_utilization=utilization),
                model_ref=model,
            )
            # three rows a goal: on a card where a goal's plans sit at the band's edge (the
            # RTX 3090 and the 16k Llama goal) the other goals still give three plans
            for row in _window_rows(services, goal)[:3]:
                assert row.inputs is not None and row.capacity is not None
                argv = _cli_argv(row, row.inputs)
                if snapshot == "rtx4090-rtx3090":
                    argv += ["--gpus", "0,1"] if row.inputs.tensor_parallel_size > 1 \
                        else ["--gpu-index", str(_card_index(row))]
                args = build_parser("plan").parse_args(argv)
                cli_inputs = inputs_from_args(args)
                # the same budget: CUDA's total (NVML's less the reserved part), free memory
                assert cli_inputs.gpu_total_bytes == row.inputs.gpu_total_bytes
                assert cli_inputs.gpu_free_bytes == row.inputs.gpu_free_bytes
                assert key_for(cli_inputs) == key_for(row.inputs), (snapshot, row.title)
                main([*argv, "--json"])
                cli = json.loads(capsys.readouterr().out)
                window = row.capacity.to_json()
                for name in ("available_kv_bytes", "kv_cache_tokens", "num_blocks",
                             "max_concurrency", "requested_bytes", "verdict"):
                    assert cli[name] == window[name], (snapshot, row.title, name)
                compared += 1
    finally:
        services.shutdown()
    assert compared >= 3, f"{snapshot}: only {compared} plans compared"


def _card_index(row: PlanRow) -> int:
    """The NVML index of the one card a single-GPU plan of the two-card machine runs on."""
    label = row.title.rsplit("·", 1)[-1].strip()
    return 1 if "3090" in label else 0


def test_snapshot_budgets_against_cuda_total_not_nvml_total(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Qwen2.5-7B at 32k and utilization 0.92 on the desktop snapshot: both paths budget
    against the 23.65 GiB CUDA sees, not the 23.99 GiB NVML shows."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))
    main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32768",
          "--gpu-memory-utilization", "0.92", "--vllm-version", VLLM_VERSION, "--json"])
    cli = json.loads(capsys.readouterr().out)
    assert cli["inputs"]["gpu_total_bytes"] == (24564 - 346) * 2**20
    assert cli["requested_bytes"] == pytest.approx(0.92 * (24564 - 346) * 2**20, abs=2**20)
    assert round(cli["inputs"]["gpu_total_bytes"] / GiB, 2) == 23.65


def test_a_measurement_stored_by_one_path_is_shown_by_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """What ``kvpilot serve`` stores under the plan's key calibrates the window's row, and the
    other way round: one key function, one store."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop", data_dir=tmp_path)
    try:
        goal = PlanRequest(Goal(context_tokens=8192, users=4, vllm_version=VLLM_VERSION),
                           model_ref="Qwen/Qwen3-8B")
        row = _window_rows(services, goal)[0]
        assert row.inputs is not None and row.capacity is not None
        assert row.capacity.inputs.get("kv_source") != FROM_MEASURED
        argv = _cli_argv(row, row.inputs)
        cli_inputs = inputs_from_args(build_parser("plan").parse_args(argv))
        measured_kv = row.capacity.available_kv_bytes - 512 * 2**20
        store = MeasurementStore(tmp_path / "measurements.json")
        store.record(key_for(cli_inputs), Measured(
            available_kv_bytes=measured_kv, measured_at="2026-12-03T06:00:00Z", source="launch",
        ))
        again = next(r for r in _window_rows(services, goal) if r.title == row.title)
        assert again.capacity is not None
        assert again.capacity.inputs["kv_source"] == FROM_MEASURED
        assert again.capacity.available_kv_bytes == measured_kv
        main([*argv, "--json"])
        cli = json.loads(capsys.readouterr().out)
        assert cli["inputs"]["kv_source"] == FROM_MEASURED
        assert cli["available_kv_bytes"] == measured_kv
    finally:
        services.shutdown()


def test_planner_mode_budgets_against_the_linux_cuda_total(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """``--gpu 'RTX 4090'`` (no GPU here) and the window's planner mode: 23.65 GiB, what vLLM
    reports for this card on Linux, not the 23.99 GiB of its NVML total."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "no-driver")
    main(["plan", "--gpu", "RTX 4090", "--model", "Qwen/Qwen2.5-7B-Instruct", "--json",
          "--vllm-version", VLLM_VERSION])
    cli = json.loads(capsys.readouterr().out)
    total = cli["inputs"]["gpu_total_bytes"]
    assert 23.5 * GiB <= total <= 23.7 * GiB
    window = AppServices.target_from_spec("NVIDIA GeForce RTX 4090")
    assert window.total_bytes == total and window.nvml_total_bytes == 24564 * 2**20
    assert "reported by vLLM" in window.total_source
    pair = AppServices.target_from_spec("2x NVIDIA GeForce RTX 4090")
    assert pair.total_bytes == total and pair.count == 2
