"""Fallbacks for a CUDA-graph capture OOM and for a negative KV budget, with their effect.

The failures are the scanner's own readings of the recorded lines (so the numbers the
fallbacks size themselves on are what vLLM printed); the predicted effects are the fit engine's.
"""

from __future__ import annotations

from dataclasses import replace

from fitkit import rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import activation, fallback
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail
from kvpilot.core.vllm.logparse import LogScanner

GRAPH_OOM = (
    "Capturing CUDA graphs (FULL):  57%|█████▋    | 20/35 [00:02<00:01,  9.10it/s]",
    "[rank0] memory allocation failed with OOM on device 0 while trying to allocate 2097152 "
    "bytes (free: 2031616, total: 23661248512)",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
    "proc(s): {'EngineCore': 1}",
)


def _failure(lines: tuple[str, ...], version: str) -> Failure:
    scanner = LogScanner(version=version)
    for line in lines:
        scanner.feed(line)
    assert scanner.failure is not None
    return scanner.failure


def test_graph_oom_options_name_the_release_flag_and_their_effect(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, max_num_seqs=64, vllm_version="0.33.0")
    failure = _failure(GRAPH_OOM, "0.33.0")
    assert failure.kind == failures.CUDA_OOM_GRAPHS
    options = {o.kind: o for o in fallback.propose(failure, inputs)}
    assert {fallback.EAGER, fallback.SMALLER_CAPTURE, fallback.PIECEWISE_GRAPHS,
            fallback.UTILIZATION} <= set(options)
    before = compute_capacity(inputs)

    smaller = options[fallback.SMALLER_CAPTURE]
    assert smaller.inputs.max_cudagraph_capture_size == 64  # default min(2 x 64, 512) halved
    assert "--max-cudagraph-capture-size" in smaller.label
    assert smaller.capacity.cudagraph_bytes == before.cudagraph_bytes // 2
    assert smaller.capacity.available_kv_bytes > before.available_kv_bytes  # graphs in budget

    piecewise = options[fallback.PIECEWISE_GRAPHS]
    assert piecewise.inputs.cudagraph_mode == "PIECEWISE"
    assert piecewise.capacity.cudagraph_bytes == int(
        before.cudagraph_bytes * activation.PIECEWISE_GRAPH_SHARE)
    assert f"{before.cudagraph_bytes / GiB:.2f} -> " in piecewise.label

    eager = options[fallback.EAGER]
    assert eager.capacity.cudagraph_bytes == 0

    lower = options[fallback.UTILIZATION]
    # 15 of 35 graphs were still to capture: room for them leaves the KV pool
    left = int(activation.cudagraph_bytes(
        qwen7b, max_num_seqs=64, max_num_batched_tokens=before.max_num_batched_tokens,
    ) * 15 / 35)
    util = before.gpu_memory_utilization
    assert lower.inputs.gpu_memory_utilization <= util - left / inputs.gpu_total_bytes
    assert lower.inputs.gpu_memory_utilization <= round(util - 0.02, 2)
    assert lower.capacity.available_kv_bytes < before.available_kv_bytes
    assert all(o.label and "—" in o.label for o in options.values())


def test_capture_size_flag_follows_the_release(qwen7b: ModelSpec) -> None:
    failure = _failure(GRAPH_OOM, "0.11.0")
    old = rtx4090(qwen7b, max_model_len=8192, max_num_seqs=64, vllm_version="0.11.0")
    options = {o.kind: o for o in fallback.propose(failure, old)}
    smaller = options[fallback.SMALLER_CAPTURE]
    assert "--cuda-graph-sizes" in smaller.label
    argv = build_argv_tail(LaunchSpec.from_plan(smaller.inputs, "/m"))
    assert argv[argv.index("--cuda-graph-sizes") + 1] == "64"
    # 0.10: PIECEWISE is already the default, so no FULL -> PIECEWISE option
    v010 = fallback.propose(failure, replace(old, vllm_version="0.10.2"))
    assert fallback.PIECEWISE_GRAPHS not in {o.kind for o in v010}
    piecewise = options[fallback.PIECEWISE_GRAPHS]
    argv = build_argv_tail(LaunchSpec.from_plan(piecewise.inputs, "/m"))
    assert argv[argv.index("--compilation-config") + 1] == '{"cudagraph_mode":"PIECEWISE"}'
    new = build_argv_tail(LaunchSpec.from_plan(
        replace(smaller.inputs, vllm_version="0.33.0"), "/m"))
    assert new[new.index("--max-cudagraph-capture-size") + 1] == "64"


NEGATIVE = (
    "(APIServer pid=1) INFO 03-09 12:55:01 [utils.py:233] non-default args: {'model': '/m', "
    "'max_model_len': 8192, 'gpu_memory_utilization': 0.75}",
    "(EngineCore_DP0 pid=2) INFO 03-09 12:56:30 [gpu_model_runner.py:2602] Model loading took "
    "14.19 GiB memory and 8.1 seconds",
    "(EngineCore_DP0 pid=2) INFO 03-09 12:56:44 [gpu_worker.py:424] Available KV cache memory: "
    "-1.25 GiB",
    "(EngineCore_DP0 pid=2) ERROR 03-09 12:56:44 [core.py:1100] ValueError: No available memory "
    "for the cache blocks.",
)


def test_negative_budget_offers_a_utilization_sized_on_vllms_figure(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.75,
                     vllm_version="0.16.0")
    failure = _failure(NEGATIVE, "0.16.0")
    assert failure.kind == failures.NEGATIVE_KV_BUDGET
    options = fallback.propose(failure, inputs)
    util = next(o for o in options if o.kind == fallback.UTILIZATION)
    reported = round(-1.25 * GiB)
    predicted_now = compute_capacity(inputs).available_kv_bytes
    gap = predicted_now - reported
    new_util = util.inputs.gpu_memory_utilization
    assert new_util > 0.75
    # the budget vLLM would compute at the new utilization covers one 8,192-token request
    expected = reported + (new_util - 0.75) * inputs.gpu_total_bytes
    assert util.capacity.available_kv_bytes == compute_capacity(
        util.inputs).available_kv_bytes - gap
    assert abs(util.capacity.available_kv_bytes - expected) < 0.02 * GiB
    assert util.capacity.max_concurrency >= 1 and util.predicted_fits
    assert f"KV {util.capacity.available_kv_bytes / GiB:.2f} GiB" in util.label
    assert options[0].kind == fallback.UTILIZATION
    # no fallback shortens the context: the context is not what is wrong
    assert fallback.SHORTER_CONTEXT not in {o.kind for o in options}


def test_negative_budget_with_another_program_on_the_gpu(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.92,
                     vllm_version="0.16.0")
    failure = Failure(
        failures.NEGATIVE_KV_BUDGET, "negative",
        details={"available_kv_bytes": round(-3.5 * GiB)},
    )
    free = 14 * GiB  # the other program holds ~10 GiB: no utilization above 0.92 starts
    options = fallback.propose(failure, inputs, free_bytes=free)
    kinds = [o.kind for o in options]
    assert fallback.FREE_THE_GPU in kinds
    close = next(o for o in options if o.kind == fallback.FREE_THE_GPU)
    gap = compute_capacity(inputs).available_kv_bytes + round(3.5 * GiB)
    assert f"{gap / GiB:.2f} GiB more in use than planned" in close.label
    assert close.inputs == inputs
    assert all(o.inputs.gpu_memory_utilization in (None, 0.92) or o.kind != fallback.UTILIZATION
               or o.inputs.gpu_memory_utilization < 0.92 for o in options)
