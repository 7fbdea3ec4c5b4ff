"""The model runner each vLLM release picks (read in each wheel's config/vllm.py), and the
sampler path the plan then follows."""

from __future__ import annotations

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit import runner
from kvpilot.core.fit.budget import CUDA_CONTEXT_BYTES, compute_capacity

QWEN3_8B = fixture_spec("qwen3-8b", weights_bytes=int(15.3 * GiB))


@pytest.mark.parametrize(("name", "version", "v2"), [
    # Qwen3ForCausalLM: the first default architecture (0.22), none before
    ("qwen3-8b", "0.21.0", False),
    ("qwen3-8b", "0.22.1", True),
    ("qwen3-8b", "0.27.1", True),
    # Qwen2ForCausalLM: outside the 0.22-0.24 sets, any dense model from 0.25
    ("qwen2.5-7b-instruct", "0.24.0", False),
    ("qwen2.5-7b-instruct", "0.25.1", True),
    # a MoE outside the default set stays on V1 until 0.29 runs every model on V2
    ("qwen3-30b-a3b", "0.28.0", False),
    ("qwen3-30b-a3b", "0.29.0", True),
    # a hybrid (Gated DeltaNet layers) likewise
    ("qwen3.5-27b", "0.28.0", False),
    ("qwen3.5-27b", "0.29.0", True),
])
def test_each_release_picks_its_runner(name: str, version: str, v2: bool) -> None:
    model = fixture_spec(name)
    assert runner.uses_v2_runner(model, rtx4090(model, vllm_version=version)) is v2


def test_unsupported_drafters_send_the_model_back_to_v1() -> None:
    ngram = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    mtp = '{"method": "mtp", "num_speculative_tokens": 1}'
    assert not runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.27.1", speculative_config=ngram))
    assert runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.27.1", speculative_config=mtp))


def test_a_deprecated_mtp_spelling_is_mtp_to_the_runner_choice() -> None:
    """vLLM replaces ``qwen3_5_mtp`` (and every ``*_mtp``) with ``mtp`` before it picks the
    runner, so the V2 runner runs it as it runs ``mtp``."""
    old = '{"method": "qwen3_5_mtp", "num_speculative_tokens": 2}'
    assert runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.27.1", speculative_config=old))


def test_a_v2_run_holds_the_forward_through_the_sampler() -> None:
    """0.21.0 and 0.27.1 share one version row; only the runner differs: under V2 the
    forward's buffers are still held while the dummy sampler (logits only) runs. Eager runs:
    a first compile's benchmark of the embedding gather would set both peaks."""
    v1 = compute_capacity(rtx4090(QWEN3_8B, max_model_len=8192, vllm_version="0.21.0",
                                  enforce_eager=True))
    v2 = compute_capacity(rtx4090(QWEN3_8B, max_model_len=8192, vllm_version="0.27.1",
                                  enforce_eager=True))
    assert (v1.inputs["model_runner"], v2.inputs["model_runner"]) == ("V1", "V2")
    assert v2.activation_peak_bytes != v1.activation_peak_bytes
    v2_row = runner.runner_profile(
        runner.activation.profile_for("0.27.1"), QWEN3_8B,
        rtx4090(QWEN3_8B, vllm_version="0.27.1"))
    assert v2_row.sampler_adds_to_forward and v2_row.v2_sampler is runner.activation.SAMPLER_V2
    assert v2_row.key == "0.20"  # the row's fitted constants still apply


def test_graphs_captured_outside_the_budget_need_free_memory_beyond_it() -> None:
    """By the code the V2 runner's graphs (before 0.29) are captured after the KV cache from
    memory the budget leaves free: with less free than the capture takes the plan is
    borderline (an L4 shared with another process ran out of memory capturing, 0.28.0)."""
    def plan(version: str, free_beyond_budget_gib: float, **kw: object):
        total = rtx4090(QWEN3_8B).gpu_total_bytes
        free = int(total * 0.8) + 1 + CUDA_CONTEXT_BYTES + int(free_beyond_budget_gib * GiB)
        return compute_capacity(rtx4090(QWEN3_8B, max_model_len=4096, vllm_version=version,
                                        gpu_memory_utilization=0.8, gpu_free_bytes=free, **kw))

    assert plan("0.27.1", 4.0).verdict == "fits"
    tight = plan("0.27.1", 0.05)
    assert tight.verdict == "borderline"
    assert plan("0.27.1", 0.05, enforce_eager=True).verdict == "fits"  # nothing captured
    # V1 (0.21) and V2 from 0.29 hold the estimate inside the budget: no capture outside it
    assert plan("0.21.0", 0.05).verdict == "fits"
    assert plan("0.29.0", 0.05).verdict == "fits"



def test_the_environment_variable_decides_first() -> None:
    """VllmConfig.use_v2_model_runner reads VLLM_USE_V2_MODEL_RUNNER before any rule."""
    assert runner.uses_v2_runner(QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.28.0"))
    assert not runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.28.0", use_v2_model_runner=False))
    # before 0.22 only the variable picks it, from the first wheel that has it (0.12.0)
    assert runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.21.0", use_v2_model_runner=True))
    assert not runner.uses_v2_runner(QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.21.0"))
    assert not runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.11.0", use_v2_model_runner=True))
    # pooling waits for 0.29
    assert not runner.uses_v2_runner(
        QWEN3_8B, rtx4090(QWEN3_8B, vllm_version="0.28.0", use_v2_model_runner=True,
                          runner="pooling"))
