"""The relaunch a pressure signal of the running server asks for (the dashboard's button): one
setting changed on the running plan, or nothing where no setting relieves it."""

from __future__ import annotations

from dataclasses import replace

from fitkit import fixture_spec, rtx4090

from kvpilot.core.app import launch
from kvpilot.core.base.model_spec import ModelSpec


def test_pressure_fixes_follow_the_signal(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, max_num_seqs=4, gpu_memory_utilization=0.9)
    fp8 = launch.fix_for_pressure(launch.PRESSURE_KV_FULL, inputs)
    assert fp8 is not None and fp8.kv_cache_dtype == "fp8"
    old_gpu = replace(inputs, compute_capability=(7, 5))  # no FP8 KV: one sequence fewer
    fewer = launch.fix_for_pressure(launch.PRESSURE_KV_FULL, old_gpu)
    assert fewer is not None and fewer.max_num_seqs == 3
    preempted = launch.fix_for_pressure(launch.PRESSURE_PREEMPTIONS, inputs)
    assert preempted is not None and preempted.max_num_seqs == 3
    vram = launch.fix_for_pressure(launch.PRESSURE_VRAM_FULL, inputs)
    assert vram is not None and vram.gpu_memory_utilization == 0.87
    assert launch.fix_for_pressure("cpu_bound", inputs) is None


def test_the_desktop_headroom_signal_relaunches_with_less_utilization() -> None:
    inputs = rtx4090(fixture_spec("qwen2.5-7b-instruct"), vllm_version="0.34.0",
                     gpu_memory_utilization=0.83)
    fixed = launch.fix_for_pressure(launch.PRESSURE_DESKTOP_HEADROOM, inputs)
    assert fixed is not None and fixed.gpu_memory_utilization == 0.8
