"""Fit-engine test helpers: model specs from the config.json fixtures, GPU plans."""

from __future__ import annotations

from pathlib import Path

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.models.local import spec_from_config

MODELS = Path(__file__).resolve().parent / "data" / "models"


def fixture_spec(name: str, weights_bytes: int | None = None) -> ModelSpec:
    """Spec of tests/data/models/<name>/config.json, with the given checkpoint size."""
    import json
    from dataclasses import replace

    config = json.loads((MODELS / name / "config.json").read_text())
    spec = spec_from_config(config, model_id=name, source=str(MODELS / name))
    return replace(spec, weights_bytes=weights_bytes, weights_source="file")


def rtx4090(model: ModelSpec, **kw: object) -> PlanInputs:
    """A plan on an RTX 4090 (24,564 MiB, SM 8.9)."""
    base: dict[str, object] = {
        "model": model,
        "gpu_total_bytes": 24564 << 20,
        "gpu_name": "NVIDIA GeForce RTX 4090",
        "compute_capability": (8, 9),
    }
    base.update(kw)
    return PlanInputs(**base)  # type: ignore[arg-type]


def cli_flags(inputs: PlanInputs) -> list[str]:
    """The ``kvpilot plan`` / ``serve`` flags that give the serving settings and the vLLM
    release of ``inputs`` (what the window planned), so that both paths plan the same thing."""
    flags = ["--vllm-version", inputs.vllm_version]
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens",
                 "gpu_memory_utilization", "kv_cache_memory_bytes", "quantization", "dtype",
                 "block_size", "limit_mm_per_prompt"):
        value = getattr(inputs, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    flags += ["--kv-cache-dtype", inputs.kv_cache_dtype,
              "--tensor-parallel-size", str(inputs.tensor_parallel_size)]
    if inputs.enforce_eager:
        flags.append("--enforce-eager")
    if inputs.enable_prefix_caching is not None:
        flags.append("--enable-prefix-caching" if inputs.enable_prefix_caching
                     else "--no-enable-prefix-caching")
    if inputs.enable_lora:
        flags.append("--enable-lora")
    if inputs.fully_sharded_loras:
        flags.append("--fully-sharded-loras")
    for name in ("max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
                 "speculative_config", "runner"):
        value = getattr(inputs, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    if inputs.pipeline_parallel_size != 1:
        flags += ["--pipeline-parallel-size", str(inputs.pipeline_parallel_size)]
    if inputs.language_model_only:
        flags.append("--language-model-only")
    for name in ("cpu_offload_gb", "mamba_cache_mode", "mamba_ssm_cache_dtype"):
        value = getattr(inputs, name)
        if value is not None:
            flags += ["--" + name.replace("_", "-"), str(value)]
    assert inputs.max_cudagraph_capture_size is None and inputs.cudagraph_mode is None, \
        "no plan flag for these: set by fallbacks only"
    return flags
