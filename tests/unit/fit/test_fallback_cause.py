"""Fallbacks from the failure's own cause: vLLM's free-memory refusal gets the lower utilization
vLLM names, sized on vLLM's own reading; a CPU build is offered nothing about CUDA graphs; no
option relaunches what just failed; an extra argument that fixes the KV cache is in every
prediction; and the automatic policy walks the ranked options to the end."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fitkit import rtx4090

from kvpilot.core.app.launch import (
    FallbackPolicy,
    LaunchSession,
    launch_capacity,
    launch_signature,
    rank_fallbacks,
)
from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.plan import CPU_DEVICE_NAME
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.fit import fallback
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.logparse import LogScanner

#: vLLM's refusal as a 0.3x GPU build prints it (core/vllm/logfailures.py, GPU33_FORMAT)
REFUSAL = ("(EngineCore pid=4188) ERROR 11-29 10:12:03 [core.py:1584] ValueError: Free memory on "
           "device cuda:0 (20.91/23.53 GiB) on startup is less than desired GPU memory "
           "utilization (0.92, 21.65 GiB). Decrease GPU memory utilization or reduce GPU memory "
           "used by other processes.")


def _classified(line: str, version: str = "0.33.0") -> Failure:
    scanner = LogScanner(version=version)
    scanner.feed(line)
    assert scanner.failure is not None, line
    return scanner.failure


def test_free_memory_refusal_offers_the_lower_utilization_vllm_names(qwen7b: ModelSpec) -> None:
    failure = _classified(REFUSAL)
    assert failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    # planned with the free memory kvpilot read earlier: 0.92 passed then, not at launch
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, gpu_memory_utilization=0.92,
                     max_model_len=8192, max_num_seqs=4, vllm_version="0.33.0")
    options = fallback.propose(failure, inputs, free_bytes=23_000 * MiB)
    utilization = [o for o in options if o.kind == fallback.UTILIZATION]
    assert utilization, [o.label for o in options]
    util = utilization[0].inputs.gpu_memory_utilization
    assert util is not None
    # vLLM read 20.91 of 23.53 GiB free after its own context: at most 0.88 passes its check
    assert util <= 0.88
    assert util * 23.53 * GiB <= 20.91 * GiB
    assert options[0].kind == fallback.UTILIZATION


def test_a_cpu_build_is_offered_no_eager_mode(qwen7b: ModelSpec) -> None:
    gpu = rtx4090(qwen7b, max_model_len=32768, max_num_seqs=4, vllm_version="0.33.0")
    cpu = replace(gpu, gpu_name=CPU_DEVICE_NAME, compute_capability=None,
                  vllm_version="0.32.0+cpu")
    failure = Failure(failures.KV_CACHE_TOO_SMALL, "too small", estimated_max_model_len=4096)
    assert fallback.EAGER in {o.kind for o in fallback.propose(failure, gpu)}
    on_cpu = fallback.propose(failure, cpu)
    assert on_cpu
    assert fallback.EAGER not in {o.kind for o in on_cpu}


def test_no_option_relaunches_what_just_failed(qwen7b: ModelSpec) -> None:
    """The plan left the utilization to vLLM (0.92 on 0.33); an option "utilization 0.92"
    would launch the same server again."""
    inputs = rtx4090(qwen7b, max_model_len=32768, max_num_seqs=64, vllm_version="0.33.0")
    original = compute_capacity(inputs)
    assert original.gpu_memory_utilization == 0.92
    free = 24564 * MiB  # an idle card: the most that passes is above 0.92
    failure = Failure(failures.CUDA_OOM_LOADING, "oom")
    for option in fallback.propose(failure, inputs, free_bytes=free):
        cap = option.capacity
        assert (option.inputs.model.model_id, cap.gpu_memory_utilization, cap.max_model_len,
                cap.max_num_seqs, cap.kv_cache_dtype, option.inputs.enforce_eager) != (
            inputs.model.model_id, 0.92, original.max_model_len, original.max_num_seqs,
            original.kv_cache_dtype, inputs.enforce_eager), option.label


def test_an_extra_argument_that_fixes_the_kv_blocks_is_in_every_prediction(
    qwen7b: ModelSpec,
) -> None:
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, max_model_len=8192, max_num_seqs=4,
                     vllm_version="0.33.0")
    extra = ("--num-gpu-blocks-override", "4")
    predicted = launch_capacity(inputs, extra)
    assert predicted.num_blocks == 4
    assert predicted.kv_cache_tokens <= 4 * predicted.block_size
    assert not predicted.fits
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    spec = replace(spec, extra_args=extra)
    failure = Failure(failures.KV_CACHE_TOO_SMALL, "too small", estimated_max_model_len=48)
    choices = rank_fallbacks(failure, spec, inputs)
    assert choices
    for choice in choices:
        assert choice.capacity is None or choice.capacity.num_blocks == 4, choice.label
        assert "fits 4 users" not in choice.label


def test_automatic_fallback_walks_the_ranked_options_to_the_end(
    qwen7b: ModelSpec, tmp_path: Path
) -> None:
    """Every relaunch fails the same way and proposes the same list: each option is taken once,
    in rank order, and the session stops when none is left (not after the first)."""
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, max_model_len=32768, max_num_seqs=8,
                     vllm_version="0.33.0")
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct")
    failure = Failure(failures.CUDA_OOM_LOADING, "oom")
    runtime = VllmRuntime(("vllm",), "0.33.0", "path", "vllm")
    session = LaunchSession(runtime, tmp_path, policy=FallbackPolicy(automatic=True),
                            record_runs=False)
    session.launched.append(launch_signature(spec))  # what start() records
    ranked = [c for c in rank_fallbacks(failure, spec, inputs)
              if c.changes and "model" not in c.changes]
    assert len(ranked) >= 3
    taken = []
    while (choice := session.automatic_choice(rank_fallbacks(failure, spec, inputs))) is not None:
        taken.append(choice.change)
    assert taken == [c.change for c in ranked][:session.policy.max_attempts]
    assert session.fallbacks_taken == len(taken)


def test_a_cpu_plan_uses_the_cpu_backends_block_and_the_fixed_block_count(
    qwen7b: ModelSpec,
) -> None:
    """vLLM 0.32.0 CPU allocates 128-token blocks (platforms/cpu.py); four of them are the 512
    tokens it reports, not 16-token blocks' 64 nor the utilization budget's 800k."""
    cpu = rtx4090(qwen7b, gpu_name=CPU_DEVICE_NAME, compute_capability=None,
                  gpu_total_bytes=64 << 30, vllm_version="0.32.0+cpu", max_model_len=4096)
    assert compute_capacity(cpu).block_size == 128
    fixed = launch_capacity(cpu, ("--num-gpu-blocks-override=4",))
    assert (fixed.num_blocks, fixed.kv_cache_tokens) == (4, 512)
    assert fixed.verdict == "does_not_fit"
    assert fixed.failure is not None and "the KV cache the launch fixes" in fixed.failure.message


def test_a_cpu_workers_share_all_taken_gets_a_utilization_that_holds_it(
    qwen7b: ModelSpec,
) -> None:
    """The real vLLM 0.32.0 CPU refusal at utilization 0.01 (tests/data/vllm_logs/cpu_0.32/
    fail_b5_util_0.01.log): the worker held 0.61 GiB before its KV cache; the option raises the
    utilization to hold that and the plan's KV, within the RAM vLLM saw free."""
    scanner = LogScanner(version="0.32.0+cpu")
    log = Path(__file__).parents[2] / "data" / "vllm_logs" / "cpu_0.32" / "fail_b5_util_0.01.log"
    for line in log.read_text(encoding="utf-8").splitlines():
        scanner.feed(line)
    failure = scanner.failure
    assert failure is not None and failure.kind == failures.NO_KV_MEMORY
    cpu = rtx4090(qwen7b, gpu_name=CPU_DEVICE_NAME, compute_capability=None,
                  gpu_total_bytes=round(23.54 * GiB), vllm_version="0.32.0+cpu",
                  max_model_len=1024, max_num_seqs=4, gpu_memory_utilization=0.01)
    options = fallback.propose(failure, cpu)
    raised = [o for o in options if o.kind == fallback.UTILIZATION]
    assert len(raised) == 1
    util = raised[0].inputs.gpu_memory_utilization
    assert util is not None
    per_request = compute_capacity(cpu).kv_bytes_per_token * 1024 * 4
    assert util * 23.54 * GiB >= 0.61 * GiB + per_request
    assert util * 23.54 * GiB <= 18.36 * GiB
    assert fallback.EAGER not in {o.kind for o in options}


def test_options_that_all_serve_the_users_still_read_apart(qwen7b: ModelSpec) -> None:
    """Every option of a KV-too-small banner serving the 4 users used to read "fits 4 users";
    each now names the KV tokens it is predicted to leave."""
    inputs = rtx4090(qwen7b, gpu_free_bytes=23_000 * MiB, max_model_len=32768, max_num_seqs=4,
                     gpu_memory_utilization=0.80, vllm_version="0.33.0")
    failure = Failure(failures.KV_CACHE_TOO_SMALL, "too small", estimated_max_model_len=20000)
    options = fallback.propose(failure, inputs, free_bytes=23_000 * MiB)
    fitting = [o for o in options if o.predicted_fits]
    assert len(fitting) >= 2
    for o in fitting:
        assert f"{o.capacity.kv_cache_tokens:,} KV tokens" in o.label
    assert len({o.label.split(" — ", 1)[1] for o in fitting}) == len(fitting)
