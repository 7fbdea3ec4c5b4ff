"""ServingSettings: one type shared by plan, launch spec, measurement key and profile; the
measured terms that replace the model; the start-up check at launch time."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fitkit import rtx4090

from kvpilot.core.app.launch import LaunchSession, rank_fallbacks
from kvpilot.core.base import failures
from kvpilot.core.base.plan import PlanInputs, ServingSettings, settings_from_dict
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
from kvpilot.core.fit.measurements import Measured, MeasurementRecord
from kvpilot.core.hardware import free_now
from kvpilot.core.hardware.target import DeviceTarget
from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail


def test_plan_inputs_and_launch_spec_carry_the_same_settings(qwen7b) -> None:
    inputs = rtx4090(qwen7b, max_model_len=16384, max_num_seqs=6, dtype="float16",
                     block_size=32, enable_prefix_caching=False, kv_cache_dtype="fp8")
    assert isinstance(inputs, ServingSettings)
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    assert spec.settings == inputs.settings
    tail = build_argv_tail(spec)
    for flag, value in (("--dtype", "float16"), ("--block-size", "32"),
                        ("--max-num-seqs", "6"), ("--kv-cache-dtype", "fp8")):
        assert tail[tail.index(flag) + 1] == value
    assert "--no-enable-prefix-caching" in tail


def test_with_settings_and_changes_round_trip(qwen7b) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192)
    wanted = ServingSettings(max_model_len=4096, enforce_eager=True)
    changed = inputs.with_settings(wanted)
    assert isinstance(changed, PlanInputs) and changed.model is inputs.model
    assert changed.settings == wanted
    assert inputs.settings_changes(changed) == {"max_model_len": 4096, "enforce_eager": True}


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"max_model_len": "4k"}, "max_model_len"),
        ({"max_num_seqs": True}, "max_num_seqs"),
        ({"gpu_memory_utilization": "0.9"}, "gpu_memory_utilization"),
        ({"enforce_eager": 1}, "enforce_eager"),
        ({"tensor_parallel_size": 1.5}, "tensor_parallel_size"),
        ({"dtype": 16}, "dtype"),
    ],
)
def test_settings_from_dict_names_the_bad_field(data: dict, needle: str) -> None:
    with pytest.raises(TypeError, match=needle):
        settings_from_dict(data)


def test_an_exact_measurement_replaces_every_reported_term(qwen7b) -> None:
    inputs = rtx4090(qwen7b, max_model_len=32768, gpu_memory_utilization=0.9)
    predicted = compute_capacity(inputs)
    measured = Measured(
        measured_at="2026-11-29T09:00:00+00:00", source="launch",
        weights_bytes=14 * GiB, available_kv_bytes=5 * GiB, kv_cache_tokens=93_000,
        cudagraph_bytes=GiB // 2,
    )
    cap = calibrated_capacity(inputs, [MeasurementRecord(key_for(inputs), measured)])
    terms = {t.name: t for t in cap.terms}
    assert terms["weights"].bytes == 14 * GiB and terms["weights"].source == "measured"
    assert terms["kv_cache"].bytes == 5 * GiB
    graphs = terms["cudagraph"]
    assert graphs.source == ("measured" if predicted.cudagraph_bytes else "model")
    # the activation term is what the reported budget leaves: the terms add up again
    total = sum(t.bytes for n, t in terms.items() if n != "requested")
    assert total == terms["requested"].bytes
    assert terms["activation_peak"].source == "measured"


def test_a_measurement_of_another_release_is_not_used(qwen7b) -> None:
    inputs = rtx4090(qwen7b, max_model_len=32768, vllm_version="0.33.0")
    other = key_for(replace(inputs, vllm_version="0.32.0+cpu"))
    measured = Measured(measured_at="2026-11-29T09:00:00+00:00", source="launch",
                        available_kv_bytes=GiB, kv_cache_tokens=1)
    cap = calibrated_capacity(inputs, [MeasurementRecord(other, measured)])
    assert cap == compute_capacity(inputs)


def test_launch_time_check_uses_the_free_memory_now(qwen7b, monkeypatch) -> None:
    planned = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.9,
                      gpu_free_bytes=23 * GiB)
    device = DeviceTarget("NVIDIA GeForce RTX 4090", planned.gpu_total_bytes, 23 * GiB, (8, 9),
                          detected=True)
    assert compute_capacity(planned).failure is None
    now = replace(device, free_bytes=20 * GiB,
                  memory_holders=(("firefox", 2 * GiB), ("Xorg", GiB)))
    monkeypatch.setattr(free_now, "read_free_memory",
                        lambda *_a, **_k: (now.free_bytes, now.memory_holders))
    refused = _session(device).startup_check(planned)
    assert refused is not None
    assert refused.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    assert "firefox (2.0 GiB), Xorg (1.0 GiB)" in refused.failure.message
    assert refused.inputs.gpu_free_bytes == 20 * GiB
    # a utilization fallback that fits the free memory is proposed
    spec = LaunchSpec.from_plan(planned, "m")
    choices = rank_fallbacks(refused.failure, spec, refused.inputs)
    assert choices and choices[0].changes["gpu_memory_utilization"] < 0.9
    assert choices[0].capacity is not None and choices[0].capacity.fits
    monkeypatch.setattr(free_now, "read_free_memory", lambda *_a, **_k: (23 * GiB, ()))
    assert _session(device).startup_check(planned) is None
    assert _session(replace(device, detected=False)).startup_check(planned) is None


def _session(device: DeviceTarget) -> LaunchSession:
    """A launch session that reads the free memory as ``kvpilot serve`` does (no runtime is
    needed to check)."""
    return LaunchSession(None, Path("/nonexistent"),  # type: ignore[arg-type]
                         free_memory_now=free_now.free_memory_reader(device))


def test_a_borderline_plan_travels_with_its_rejection(qwen7b) -> None:
    """vLLM may or may not start it: the recommender does not rank it, but keeps the plan so
    that the GUI can offer it (and the dry run that settles it)."""
    from kvpilot.core.base.plan import GpuTarget
    from kvpilot.core.fit.recommend import Goal, recommend

    gpu = GpuTarget("NVIDIA GeForce RTX 4090", 24564 << 20, None, (8, 9))
    goal = Goal(context_tokens=32768, users=1)

    def at(util: float):  # type: ignore[no-untyped-def]
        fixed = ServingSettings(gpu_memory_utilization=util, kv_cache_dtype="bfloat16")
        return recommend(gpu, goal, [qwen7b], fixed=fixed)

    # the utilization whose one 32k request lands inside the band (its width is the fitted
    # validation error, so it is looked up rather than written down)
    util = next(u / 1000 for u in range(600, 900, 2)
                if not at(u / 1000).candidates and at(u / 1000).rejected[0].borderline)
    result = at(util)
    assert result.candidates == ()
    (rejection,) = result.rejected
    assert rejection.borderline is not None
    inputs, cap = rejection.borderline
    assert cap.verdict == "borderline" and inputs.gpu_memory_utilization == util
    low, high = cap.available_kv_band_bytes
    assert low < cap.available_kv_bytes < high
    assert "kvpilot plan --measure" in rejection.reason
