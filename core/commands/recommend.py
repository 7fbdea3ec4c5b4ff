"""``kvpilot recommend``: ranked deployments for a GPU and a goal.

Contract::

    kvpilot recommend [--gpu NAME|--gpu-total-mib N] [--gpu-free-mib N] [--context L]
                      [--users N] [--use-case chat|long-docs|batch] [serving flags] [--json]
                      [--gpu '2x RTX 4090' | --gpu 'RTX 4090 + RTX 3090']
                      [--gpu-index N | --gpus 0,1]

The serving flags are those of ``plan`` and ``serve`` (``--max-model-len`` and
``--max-num-seqs`` stand for ``--context`` and ``--users``); a flag given fixes that setting
in every candidate. Without a GPU flag it ranks for this machine's GPU (NVML, with its free
memory now). Candidates with a measurement on this device use it (source measured/calibrated).
``--model`` names a local model folder or a Hub repo id (that model is ranked), or a catalog id
or a part of catalog ids (the catalog is filtered).

The ranking is the application layer's (:func:`kvpilot.core.app.recommend.rank`), the one the
window's planner shows: this module parses the flags and prints the answer.

Several GPUs (named, or this machine's with ``--gpus``) rank each card alone (the one that does
not drive the display first) and tensor-parallel plans over all of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from kvpilot.core.app.recommend import Ranking, RecommendRequest, rank
from kvpilot.core.base import paths
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.goal import (
    DEFAULT_CONTEXT_TOKENS,
    DEFAULT_USERS,
    USE_CASE_CONTEXT_TOKENS,
    Goal,
    min_weight_bits_for,
)
from kvpilot.core.base.units import GiB
from kvpilot.core.base.versions import NEWEST_KNOWN
from kvpilot.core.base.words import counted, significant, times_text
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.serving_args import (
    add_device_arguments,
    add_serving_arguments,
    context_arg,
    device_from_args,
    settings_from_args,
)
from kvpilot.core.fit.recommend import USE_CASES


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "recommend", help="rank complete deployments for a GPU and a goal",
        description="Rank checkpoint x context x sequences x KV dtype x utilization for a GPU.",
    )
    add_device_arguments(parser)
    parser.add_argument("--context", "--max-model-len", dest="context", type=context_arg,
                        default=None,
                        help="tokens per request: 8192, 32768 or 32k (k = 1,024 tokens); "
                        f"default {DEFAULT_CONTEXT_TOKENS:,}, 32k for long documents")
    parser.add_argument("--users", "--max-num-seqs", dest="users", type=int,
                        default=DEFAULT_USERS, help="concurrent requests")
    add_serving_arguments(parser, with_length_and_seqs=False)
    parser.add_argument("--use-case", choices=USE_CASES, default="chat")
    parser.add_argument("--no-4bit", action="store_true", help="quality floor: 8-bit or better")
    parser.add_argument("--model", help="a local model folder or Hub repo id to rank, or only "
                        "the catalog checkpoints whose id contains this text")
    parser.add_argument("--vllm-version", default=None,
                        help=f"vLLM version to plan for (default: the installed vLLM's, else "
                        f"{NEWEST_KNOWN})")
    parser.add_argument("--limit", type=int, default=10, help="candidates to show")
    parser.add_argument("--json", action="store_true")
    return parser


def run(args: argparse.Namespace) -> int:
    if args.users <= 0:
        raise FitError("--users must be positive")
    from kvpilot.core.commands.plan import detected_vllm_version

    version = args.vllm_version or detected_vllm_version() or NEWEST_KNOWN
    goal = Goal(
        use_case=args.use_case,
        context_tokens=args.context or USE_CASE_CONTEXT_TOKENS.get(args.use_case,
                                                                   DEFAULT_CONTEXT_TOKENS),
        users=args.users,
        min_weight_bits=min_weight_bits_for(not args.no_4bit),
        vllm_version=version,
    )
    result = rank(RecommendRequest(
        device=device_from_args(args, version), goal=goal, fixed=settings_from_args(args),
        model_ref=args.model or "", limit=args.limit, measurements=paths.measurements_path(),
    ))
    if result.measurements_problem:
        print(f"note: {result.measurements_problem}", file=sys.stderr)
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print(render(result))
    return 0 if result.candidates else 1


def _gpu_name(result: Ranking) -> str:
    """The GPU's name as shown: none for a size given with ``--gpu-total-mib``."""
    return "" if result.gpu.name == "gpu" else result.gpu.name


def to_json(result: Ranking) -> dict[str, Any]:
    """The JSON form: goal, GPU, ranked candidates with their budgets, rejections (borderline
    ones first, with their plan's verdict), and how the utilization was chosen."""
    return {
        "gpu": {"name": _gpu_name(result), "total_bytes": result.gpu.total_bytes,
                "free_bytes": result.gpu.free_bytes},
        "goal": {"use_case": result.goal.use_case, "context": result.goal.context_tokens,
                 "users": result.goal.users, "min_weight_bits": result.goal.min_weight_bits},
        "candidates": [
            {
                "rank": i + 1,
                "model": c.model_id,
                "quantization": c.quantization,
                "weight_bits": c.weight_bits,
                "max_model_len": c.capacity.max_model_len,
                "max_num_seqs": c.capacity.max_num_seqs,
                "kv_cache_dtype": c.capacity.kv_cache_dtype,
                "gpu_memory_utilization": c.capacity.gpu_memory_utilization,
                "kv_cache_tokens": c.capacity.kv_cache_tokens,
                "max_concurrency": round(c.capacity.max_concurrency, 2),
                "headroom_bytes": c.capacity.headroom_bytes,
                "kv_headroom_bytes": c.kv_headroom_bytes,
                "tight": c.tight,
                "decode_tokens_per_s": round(c.decode_tokens_per_s, 1)
                if c.decode_tokens_per_s else None,
                "ttft_s": round(c.ttft_s, 3) if c.ttft_s else None,
                "score": c.score,
                "quality": c.quality.to_json(),
                "base_model": c.base_model or c.model_id,
                "size_estimated": c.size_estimated,
                "repeat_of_model": c.repeat_of_model,
                "reason": c.reason,
                "gpus": c.gpus_label or _gpu_name(result),
                "gpu_positions": list(c.gpu_positions),
                "tensor_parallel_size": c.inputs.tensor_parallel_size,
                "pipeline_parallel_size": c.inputs.pipeline_parallel_size,
                "parallel_note": c.parallel_note,
                "budget": c.capacity.to_json(),
            }
            for i, c in enumerate(result.candidates)
        ],
        "rejected": [
            {"model": r.model_id, "reason": r.reason, "shortfall_bytes": r.shortfall_bytes,
             "borderline": r.borderline is not None}
            for r in result.rejected
        ],
        "utilization_choice": result.choice.to_json(),
    }


def render(result: Ranking) -> str:
    """The text form: the ranked candidates, then the rejections (borderline ones first)."""
    g = result.goal
    lines = [
        f"Ranked plans for {_gpu_name(result) or 'GPU'} ({result.gpu.total_bytes / GiB:.1f} GiB): "
        f"{g.use_case} · {g.context_tokens:,} context · {counted(g.users, 'user')}",
        *([f"   {result.choice.sentence}"] if result.choice.sentence else []),
        "",
        f"{'#':>2} {'checkpoint':48} {'KV':5} {'util':>5} {'KV tokens':>10} {'conc':>6} "
        f"{'tok/s':>6} {'TTFT':>6}  reason",
    ]
    for i, c in enumerate(result.candidates, 1):
        cap = c.capacity
        tps = significant(c.decode_tokens_per_s) if c.decode_tokens_per_s else "-"
        ttft = f"{c.ttft_s:.2f}s" if c.ttft_s else "-"
        title = c.model_id + (f" [{c.gpus_label}]" if c.gpus_label else "")
        lines.append(
            f"{i:>2} {title:48} {cap.kv_cache_dtype:5} {cap.gpu_memory_utilization:>5.2f} "
            f"{cap.kv_cache_tokens:>10,} {times_text(cap.max_concurrency):>6} {tps:>6} "
            f"{ttft:>6}  "
            f"{c.reason}"
        )
    if not result.candidates:
        lines.append("   nothing ranked serves this goal; see the rejections below")
    if result.rejected:
        lines += ["", f"rejected ({len(result.rejected)}):"]
        for r in result.rejected[:8]:
            lines.append(f"   ✗ {r.model_id}: {r.reason}")
        if len(result.rejected) > 8:
            lines.append(f"   ... and {len(result.rejected) - 8} more (--json lists all)")
    return "\n".join(lines)
