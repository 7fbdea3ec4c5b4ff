"""With LoRA slots and a drafter chosen in the window, ``kvpilot plan`` given the same flags
plans the same capacity and the same measurement key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fitkit import cli_flags

from kvpilot.core.app.adapters import adapter_settings
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.cli import build_parser, main
from kvpilot.core.commands.plan import inputs_from_args
from kvpilot.core.fit.calibrate import key_for
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest
from kvpilot.gui.services import AppServices


def test_adapters_plan_the_same_in_the_window_and_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop", data_dir=tmp_path)
    pinned = ServingSettings(**adapter_settings(lora_slots=2, lora_rank=32,
                                                speculative_method="ngram",
                                                speculative_tokens=3))
    goal = PlanRequest(Goal(context_tokens=16384, users=2, vllm_version="0.20.0"), pinned,
                       model_ref="meta-llama/Llama-3.1-8B-Instruct")
    try:
        result = services.probe()
        target = services.target_from_selection(result, tuple(g.index for g in result.gpus))
        rows = [r for r in services.plan(target, goal).rows if r.inputs is not None]
    finally:
        services.shutdown()
    assert rows
    for row in rows[:2]:
        assert row.inputs is not None and row.capacity is not None
        assert row.inputs.enable_lora and row.inputs.max_loras == 2
        assert json.loads(row.inputs.speculative_config or "{}")["num_speculative_tokens"] == 3
        argv = ["plan", "--model", row.model_ref, *cli_flags(row.inputs)]
        assert key_for(inputs_from_args(build_parser("plan").parse_args(argv))) == \
            key_for(row.inputs)
        main([*argv, "--json"])
        cli = json.loads(capsys.readouterr().out)
        window = row.capacity.to_json()
        for name in ("available_kv_bytes", "kv_cache_tokens", "weights_bytes",
                     "cudagraph_bytes", "activation_peak_bytes", "verdict"):
            assert cli[name] == window[name], (row.title, name)
        assert cli["inputs"]["lora_slot_bytes"] == window["inputs"]["lora_slot_bytes"]
