"""``kvpilot front``: several profiles behind one OpenAI-compatible address.

    kvpilot front --profile A --profile B [...] [--host 127.0.0.1] [--port 8000]
                  [--idle-unload SECONDS] [--max-loaded N] [--max-queue N] [--no-sleep]
                  [--vllm PATH] [--data-dir D] [--plan-only] [--json]

A request names a profile's model (its served model name, else its model reference); a profile
that is not running is started, stacked beside the running ones when the planner fits them on
the card together (each with the memory share the plan gives it), else after the least recently
used ones stop (or sleep, where vLLM and the GPU allow it). Requests that arrive meanwhile wait
in a bounded queue. ``--plan-only`` prints the planner's split and exits (status 0 when every
profile fits together, 1 when they take turns). The API key comes from ``KVPILOT_API_KEY``
(never from the command line); an address other than loopback needs one. SIGINT or SIGTERM
stops the front and every server it started.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from kvpilot.core.base.units import GiB
from kvpilot.core.commands import Subparsers

API_KEY_ENV = "KVPILOT_API_KEY"


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot front``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "front", help="serve several profiles behind one OpenAI-compatible address",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--profile", action="append", default=[], metavar="NAME", required=True,
                   help="a profile to serve (repeat for each)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (non-local needs an API key)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--idle-unload", type=float, metavar="SECONDS",
                   help="stop a profile no request used for this long (default: never)")
    p.add_argument("--max-loaded", type=int, metavar="N",
                   help="at most N profiles loaded at once (default: as many as the plan fits)")
    p.add_argument("--max-queue", type=int, default=64, metavar="N",
                   help="requests that may wait for a profile to load (default 64)")
    p.add_argument("--queue-timeout", type=float, default=900.0, metavar="SECONDS",
                   help="how long a request waits for its profile (default 900)")
    p.add_argument("--no-sleep", action="store_true",
                   help="always stop a profile to make room (never vLLM's sleep mode)")
    p.add_argument("--vllm", help="vLLM for every profile (default: each profile's own)")
    p.add_argument("--data-dir", type=Path, help="kvpilot data directory (logs, run records)")
    p.add_argument("--plan-only", action="store_true",
                   help="print the planner's split of the profiles and exit")
    p.add_argument("--json", action="store_true", help="with --plan-only: one JSON object")
    return p


def run(args: argparse.Namespace) -> int:
    from kvpilot.core.app.front import build_front, front_request

    request = front_request(
        args.profile, host=args.host, port=args.port, api_key=os.environ.get(API_KEY_ENV),
        idle_unload_s=args.idle_unload, max_loaded=args.max_loaded, max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout, allow_sleep=not args.no_sleep, vllm=args.vllm,
        data_dir=args.data_dir,
    )
    front = build_front(request)
    status = front.pool.status()
    if args.plan_only:
        if args.json:
            print(json.dumps(status["plan"] | {"profiles": status["profiles"],
                                               "sleep": status["sleep"]}, indent=2))
        else:
            print(render_plan(status))
        return 0 if status["plan"]["stack_all"] else 1
    print(render_plan(status), flush=True)
    print(f"kvpilot: front on {front.base_url}/v1 (Ctrl-C to stop)", flush=True)
    front.run()
    print("kvpilot: front stopped; every server it started is stopped", flush=True)
    return 0


def render_plan(status: dict[str, object]) -> str:
    """The split as lines: each profile's floor, want and share, and stack or swap."""
    plan = status["plan"]
    assert isinstance(plan, dict)
    lines = [f"{'profile':20} {'model':28} {'floor':>9} {'wants':>9} {'share':>9} {'util':>6}"]
    shares = plan["shares"]
    profiles = status["profiles"]
    assert isinstance(profiles, list)
    for p in profiles:
        share = shares.get(p["profile"], {})
        util = share.get("utilization")

        def gib(n: int | None) -> str:
            return "-" if n is None else f"{n / GiB:.2f} GiB"

        lines.append(f"{p['profile'][:20]:20} {p['model'][:28]:28} {gib(p['floor_bytes']):>9} "
                     f"{gib(p['want_bytes']):>9} {gib(share.get('bytes')):>9} "
                     f"{'-' if util is None else f'{util:.3f}':>6}")
        if p["plan_problem"]:
            lines.append(f"  not planned: {p['plan_problem']} (it runs alone)")
    verdict = ("stack: every profile fits on the card together" if plan["stack_all"]
               else "swap: the profiles take turns")
    lines.append(f"{verdict} ({plan['reason']})")
    sleep = status["sleep"]
    assert isinstance(sleep, dict)
    lines.append(f"sleep: {sleep['reason']}")
    return "\n".join(lines)

