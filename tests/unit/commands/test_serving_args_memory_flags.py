"""The 0.29 memory flags parse with vLLM's spelling; bad values get one sentence."""

from __future__ import annotations

import argparse

import pytest

from kvpilot.core.base.errors import FitError
from kvpilot.core.commands.serving_args import add_serving_arguments, settings_from_args


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_parse_with_vllms_spelling() -> None:
    settings = settings_from_args(_args(
        "--pipeline-parallel-size", "2", "--cpu-offload-gb", "6", "--language-model-only",
        "--kv-cache-dtype", "nvfp4", "--mamba-cache-mode", "align",
        "--mamba-ssm-cache-dtype", "float16"))
    assert settings.pipeline_parallel_size == 2 and settings.cpu_offload_gb == 6
    assert settings.language_model_only and settings.kv_cache_dtype == "nvfp4"
    assert (settings.mamba_cache_mode, settings.mamba_ssm_cache_dtype) == ("align", "float16")
    assert settings_from_args(_args("--mamba-ssm-cache-dtype", "auto")).mamba_ssm_cache_dtype \
        is None
    with pytest.raises(FitError, match="--cpu-offload-gb must be 0 or more GiB"):
        settings_from_args(_args("--cpu-offload-gb", "-1"))
    with pytest.raises(FitError, match="--pipeline-parallel-size must be at least 1"):
        settings_from_args(_args("--pipeline-parallel-size", "0"))
