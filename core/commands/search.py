"""``kvpilot search``: models on the Hugging Face Hub, sized and badged for this GPU.

Contract::

    kvpilot search QUERY [--gpu NAME|--gpu-total-mib N] [--context N] [--users N]
                   [--use-case chat|long-docs|batch] [--sort downloads|trending] [--limit N]
                   [--offline] [--refresh] [--no-runtime-filter] [--json]

Text-generation and image-text-to-text models whose id contains QUERY, each sized from the
Hub's metadata (no download) with its quantized variants, kept to the architectures the
installed vLLM registers, and badged fits / borderline / does not fit for the GPU at the goal,
with the settings to plan it with (``kvpilot plan <checkpoint> --max-model-len ...``). Results
are cached: ``--offline`` uses only the cache. Exit status 0 when a hit fits, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.versions import NEWEST_KNOWN
from kvpilot.core.base.words import counted
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.serving_args import (
    add_device_arguments,
    context_arg,
    device_from_args,
)
from kvpilot.core.fit.recommend import USE_CASES, Goal

if TYPE_CHECKING:
    from kvpilot.core.app.search import SearchHit, SearchResult


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "search", help="find models on the Hugging Face Hub that fit this GPU",
        description="Search the Hub; size every hit and its quantized variants; badge each "
        "for the GPU and goal.",
    )
    parser.add_argument("query", help="text in the repo id (e.g. 'qwen3', 'gemma')")
    add_device_arguments(parser)
    parser.add_argument("--context", type=context_arg, default=8192,
                        help="tokens per request, e.g. 8192 or 32k")
    parser.add_argument("--users", type=int, default=4, help="concurrent requests")
    parser.add_argument("--use-case", choices=USE_CASES, default="chat")
    parser.add_argument("--sort", choices=("downloads", "trending"), default="downloads")
    parser.add_argument("--limit", type=int, default=20, help="hits to show")
    parser.add_argument("--offline", action="store_true", help="use only cached results")
    parser.add_argument("--refresh", action="store_true", help="ask the Hub even if cached")
    parser.add_argument("--no-runtime-filter", action="store_true",
                        help="keep architectures the installed vLLM does not register")
    parser.add_argument("--vllm-version", default=None,
                        help=f"vLLM version to plan for (default: the installed vLLM's, else "
                        f"{NEWEST_KNOWN})")
    parser.add_argument("--json", action="store_true")
    return parser


def run(args: argparse.Namespace) -> int:
    from kvpilot.core.app.search import runtime_filter, search_hub
    from kvpilot.core.commands.plan import detected_vllm_version

    if args.context <= 0 or args.users <= 0 or args.limit <= 0:
        raise FitError("--context, --users and --limit must be positive")
    version = args.vllm_version or detected_vllm_version() or NEWEST_KNOWN
    device = device_from_args(args, version)
    goal = Goal(use_case=args.use_case, context_tokens=args.context, users=args.users,
                vllm_version=version)
    registered, note = (None, "not filtered by architecture (--no-runtime-filter)") \
        if args.no_runtime_filter else runtime_filter()
    result = search_hub(args.query, device, goal, sort=args.sort, limit=args.limit,
                        registered=registered, runtime_note=note, offline=args.offline,
                        refresh=args.refresh)
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        print(render(result))
    return 0 if any(h.badge.verdict == "fits" for h in result.hits) else 1


def to_json(result: SearchResult) -> dict[str, Any]:
    """The JSON form: query, GPU, goal, where the results came from, hits, left-out repos."""
    from kvpilot.core.app.search import hit_to_json

    g = result.goal
    return {
        "query": result.query, "sort": result.sort, "gpu": result.device_name,
        "goal": {"use_case": g.use_case, "context": g.context_tokens, "users": g.users},
        "from_cache": result.from_cache, "fetched_at_s": round(result.fetched_at_s, 1),
        "runtime_note": result.runtime_note, "stale_note": result.stale_note or None,
        "hits": [hit_to_json(h) for h in result.hits],
        "unregistered": [{"repo": r, "architecture": a} for r, a in result.unregistered],
    }


def plan_command(hit: SearchHit) -> str | None:
    """The ``kvpilot plan`` line of a hit's badge (None when nothing can be planned)."""
    b = hit.badge
    if b.checkpoint is None or b.settings is None:
        return None
    parts = ["kvpilot plan", b.checkpoint]
    if b.settings.max_model_len:
        parts.append(f"--max-model-len {b.settings.max_model_len}")
    if b.settings.max_num_seqs:
        parts.append(f"--max-num-seqs {b.settings.max_num_seqs}")
    if b.settings.kv_cache_dtype != "auto":
        parts.append(f"--kv-cache-dtype {b.settings.kv_cache_dtype}")
    if b.settings.gpu_memory_utilization:
        parts.append(f"--gpu-memory-utilization {b.settings.gpu_memory_utilization:.2f}")
    return " ".join(parts)


_MARKS = {"fits": "✓", "borderline": "~", "does_not_fit": "✗", "cannot_plan": "?"}


def render(result: SearchResult) -> str:
    from kvpilot.core.app.search import size_label

    g = result.goal
    age = time.time() - result.fetched_at_s
    where = f"cached {age / 60:.0f} min ago" if result.from_cache else "from the Hub"
    lines = [f"Hub search {result.query!r} by {result.sort} for {result.device_name}: "
             f"{g.use_case} · {g.context_tokens:,} context · {counted(g.users, 'user')} ({where})"]
    if result.stale_note:
        lines.append(f"  note: {result.stale_note}")
    if result.runtime_note:
        lines.append(f"  {result.runtime_note}")
    lines.append("")
    for i, hit in enumerate(result.hits, 1):
        b = hit.badge
        sizes = ", ".join(f"{c.scheme} {size_label(c.weights_bytes)}"
                          + (" (refused)" if c.refused else " (weight-only here)" if c.note
                             else "") for c in hit.checkpoints)
        lines.append(f"{i:>2} {_MARKS[b.verdict]} {hit.raw.repo}  [{b.label}]  "
                     f"{hit.raw.downloads:,} downloads")
        lines.append(f"     {hit.raw.architecture} · {sizes}")
        lines.append(f"     {b.reason}")
        cmd = plan_command(hit)
        if cmd:
            lines.append(f"     plan: {cmd}")
    if not result.hits:
        lines.append("   no hit that this vLLM can serve; try another query")
    if result.unregistered:
        lines.append(f"\nleft out ({len(result.unregistered)}: architecture not registered by "
                     "the installed vLLM): "
                     + ", ".join(r for r, _ in result.unregistered[:6])
                     + (" ..." if len(result.unregistered) > 6 else ""))
    return "\n".join(lines)
