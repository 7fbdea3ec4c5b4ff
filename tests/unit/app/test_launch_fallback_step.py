"""The launch session's step after a failure, the one both faces take: ranked on the memory free
now, then either the fallback the policy takes by itself (counted, capped) or all of them
offered to the user."""

from __future__ import annotations

from pathlib import Path

from fitkit import rtx4090

from kvpilot.core.app.launch import (
    FallbackPolicy,
    FallbacksOffered,
    FallbackTaken,
    LaunchSession,
    launch_signature,
    rank_fallbacks,
)
from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec

RUNTIME = VllmRuntime(("vllm",), "0.33.0", "path", "vllm")


def _session(tmp_path: Path, automatic: bool, free_now: int | None = None,
             max_attempts: int = 8) -> tuple[LaunchSession, list[int]]:
    """A session whose free-memory reads are counted in the list returned with it."""
    reads: list[int] = []

    def read() -> tuple[int, tuple[tuple[str, int], ...]] | None:
        reads.append(1)
        return (free_now, (("firefox", GiB),)) if free_now is not None else None

    session = LaunchSession(RUNTIME, tmp_path, record_runs=False,
                            policy=FallbackPolicy(automatic=automatic, max_attempts=max_attempts),
                            free_memory_now=read)
    return session, reads


def test_the_policy_takes_the_best_by_itself_and_counts_it(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, max_model_len=32768, max_num_seqs=8,
                     vllm_version="0.33.0")
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    failure = Failure(failures.CUDA_OOM_LOADING, "oom")
    session, _ = _session(tmp_path, automatic=True, max_attempts=2)
    session.launched.append(launch_signature(spec))
    ranked = [c for c in rank_fallbacks(failure, spec, inputs)
              if c.changes and "model" not in c.changes]
    first = session.after_failure(failure, spec, inputs)
    assert isinstance(first, FallbackTaken)
    assert (first.kind, first.attempt, first.max_attempts) == (failures.CUDA_OOM_LOADING, 1, 2)
    assert first.choice.change == ranked[0].change
    assert first.sentence == f"fallback 1/2: {ranked[0].description}"
    second = session.after_failure(failure, first.choice.spec, first.choice.inputs)
    assert isinstance(second, FallbackTaken) and second.attempt == 2
    third = session.after_failure(failure, second.choice.spec, second.choice.inputs)
    assert isinstance(third, FallbacksOffered)  # the cap: the user decides from here
    assert third.failure is failure and third.choices


def test_without_the_policy_every_option_is_offered_ranked(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, max_model_len=32768,
                     vllm_version="0.33.0")
    spec = LaunchSpec.from_plan(inputs, "m")
    failure = Failure(failures.KV_CACHE_TOO_SMALL, "too small", estimated_max_model_len=20_000)
    session, _ = _session(tmp_path, automatic=False)
    step = session.after_failure(failure, spec, inputs)
    assert isinstance(step, FallbacksOffered)
    assert [c.description for c in step.choices] == [
        c.description for c in rank_fallbacks(failure, spec, inputs)]
    assert session.fallbacks_taken == 0


def test_the_options_are_ranked_on_the_memory_free_now(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    """A refusal planned on 23 GiB free, with 18 GiB free now: the fresh reading sizes them."""
    inputs = rtx4090(qwen7b, gpu_free_bytes=23 * GiB, gpu_memory_utilization=0.92,
                     max_model_len=8192, vllm_version="0.33.0")
    spec = LaunchSpec.from_plan(inputs, "m")
    failure = Failure(failures.FREE_MEMORY_BELOW_UTILIZATION, "free memory below utilization")
    session, reads = _session(tmp_path, automatic=False, free_now=18 * GiB)
    step = session.after_failure(failure, spec, inputs)
    assert reads == [1]
    assert isinstance(step, FallbacksOffered)
    fresh = rank_fallbacks(failure, spec, inputs, free_bytes=18 * GiB)
    assert [c.description for c in step.choices] == [c.description for c in fresh]
    stale = rank_fallbacks(failure, spec, inputs)
    assert [c.description for c in fresh] != [c.description for c in stale]
