"""vLLM's argv carries each 0.29 memory flag once (spelled by build_argv_tail only)."""

from __future__ import annotations

from dataclasses import replace

from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail


def test_vllms_argv_carries_each_flag_once() -> None:
    spec = LaunchSpec(model="Qwen/Qwen3-8B", pipeline_parallel_size=2, cpu_offload_gb=6,
                      language_model_only=True, limit_mm_per_prompt=0, kv_cache_dtype="nvfp4",
                      mamba_cache_mode="align", mamba_ssm_cache_dtype="float16")
    tail = build_argv_tail(spec)
    text = " ".join(tail)
    for part in ("--pipeline-parallel-size 2", "--cpu-offload-gb 6", "--language-model-only",
                 "--kv-cache-dtype nvfp4", "--mamba-cache-mode align",
                 "--mamba-ssm-cache-dtype float16"):
        assert text.count(part) == 1, part
    # --language-model-only says text only itself: no --limit-mm-per-prompt beside it
    assert "--limit-mm-per-prompt" not in tail
    plain = build_argv_tail(replace(spec, pipeline_parallel_size=1, cpu_offload_gb=None,
                                    language_model_only=False, mamba_cache_mode=None,
                                    mamba_ssm_cache_dtype=None))
    assert not {"--pipeline-parallel-size", "--cpu-offload-gb", "--language-model-only",
                "--mamba-cache-mode", "--mamba-ssm-cache-dtype"} & set(plain)
