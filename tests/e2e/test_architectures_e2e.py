"""The installed vLLM's registered architectures, asked of the real CPU runtime once, then read
from the cache."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvpilot.core.base.errors import RuntimeNotFoundError
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.architectures import registered_architectures


def test_the_runtime_is_asked_once_and_the_answer_is_cached(
    vllm_runtime: VllmRuntime, tmp_path: Path
) -> None:
    first = registered_architectures(vllm_runtime, cache_dir=tmp_path)
    assert not first.from_cache
    # what vLLM 0.32 serves: the catalog's decoders, vision-language models, gpt-oss
    for arch in ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
                 "Gemma3ForConditionalGeneration", "GptOssForCausalLM"):
        assert arch in first.architectures
    assert "NotAModelForCausalLM" not in first.architectures
    start = time.perf_counter()
    again = registered_architectures(vllm_runtime, cache_dir=tmp_path)
    assert again.from_cache and again.architectures == first.architectures
    assert time.perf_counter() - start < 1.0  # a file read, not an interpreter start


def test_a_runtime_without_its_python_is_a_clear_error(tmp_path: Path) -> None:
    ghost = VllmRuntime((str(tmp_path / "bin" / "vllm"),), "0.32.0", "managed",
                        str(tmp_path / "bin" / "vllm"))
    with pytest.raises(RuntimeNotFoundError, match="no Python interpreter"):
        registered_architectures(ghost, cache_dir=tmp_path)
