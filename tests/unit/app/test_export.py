"""One export for both faces (core/app/export.py): the planner's capacity (this machine's
measurements applied), the plan's pipeline size, and a plan predicted not to start refused
with its reason unless forced."""

from __future__ import annotations

from pathlib import Path

from fitkit import rtx4090

from kvpilot.core.app.export import export_plan, refusal_of
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import FROM_MEASURED
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit.calibrate import key_for
from kvpilot.core.fit.measurements import Measured, MeasurementStore
from kvpilot.core.vllm.command import LaunchSpec


def test_a_plan_that_does_not_fit_is_refused_with_its_reason(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, gpu_free_bytes=20_000 * MiB, gpu_memory_utilization=0.95,
                     max_model_len=8192, vllm_version="0.33.0")
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    refused = export_plan(spec, inputs, "command")
    assert refused.text == "" and not refused.fits
    assert refused.capacity is not None
    assert refused.refusal == refusal_of(refused.capacity)
    assert refused.refusal.startswith("this plan is predicted not to start: ")
    assert "--gpu-memory-utilization" in refused.refusal  # vLLM's way out, named
    forced = export_plan(spec, inputs, "command", force=True)
    assert "vllm serve" in forced.text and forced.refusal == refused.refusal


def test_the_capacity_is_the_planners_and_the_pipeline_size_the_plans(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, gpu_memory_utilization=0.9,
                     max_model_len=8192, vllm_version="0.33.0", pipeline_parallel_size=2)
    store = MeasurementStore(tmp_path / "measurements.json")
    store.record(key_for(inputs), Measured(available_kv_bytes=5 * GiB,
                                           measured_at="2026-12-06T10:00:00Z", source="launch"))
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    export = export_plan(spec, inputs, "command", store=store)
    assert export.fits and export.refusal == ""
    assert export.capacity is not None
    assert export.capacity.inputs["kv_source"] == FROM_MEASURED
    assert export.capacity.available_kv_bytes == 5 * GiB
    assert "--pipeline-parallel-size 2" in export.text


def test_without_a_plan_the_checkpoint_size_sizes_the_helm_storage() -> None:
    spec = LaunchSpec(model="Qwen/Qwen2.5-7B-Instruct")
    export = export_plan(spec, None, "helm", weights_bytes=15 * GiB)
    assert export.capacity is None and export.fits and export.refusal == ""
    assert "pvcStorage: 20Gi" in export.text  # 15 GiB x 1.3, at least 20 Gi
