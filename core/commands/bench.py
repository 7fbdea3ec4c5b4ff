"""``kvpilot bench --url URL``: a streamed load test at several concurrency levels.

Prints, per level, TTFT / TPOT / end-to-end latency P50/P90/P99, output tokens/s, requests/s,
errors and goodput, then the first concurrency whose P99 breaks a goal. ``--json`` prints the
full report as one JSON document instead. Progress goes to stderr.

When NVML answers (and the target is not a remote one), GPU 0 is sampled at 10 Hz during the
run and each level also reports the GPU's energy, joules per generated token and whether a
clock-event reason slowed the card (power cap, thermal, hardware slowdown): ``gpu`` in JSON.

When the server is one kvpilot serves from this data directory (``kvpilot serve``, the window),
the report is also kept with that server's run record (``kvpilot runs show ID``).

Exit status: 0 when the run finished, 1 when every request failed or the server went away
during the run (the results so far are printed, then one line on stderr saying so), 2 for user
errors (bad settings, a remote URL without ``--allow-remote``, an unreachable server).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from kvpilot.core.app.loadtest import load_test_config, run_recorded_load_test
from kvpilot.core.base import paths
from kvpilot.core.base.hosts import URL_HELP
from kvpilot.core.commands import Subparsers
from kvpilot.core.vllm.client import (
    LoadTestConfig,
    LoadTestError,
    LoadTestProgress,
    format_report,
)


def _levels(text: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"concurrency must be integers separated by commas, e.g. 1,2,4 (got {text!r})"
        ) from exc
    if not levels or any(c < 1 for c in levels):
        raise argparse.ArgumentTypeError(f"concurrency levels must be >= 1 (got {text!r})")
    return levels


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``bench`` on the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="load-test a running OpenAI-compatible server (TTFT, TPOT, tokens/s, goodput)",
        description=(
            "Send streamed requests at each concurrency level and report latency percentiles, "
            "throughput and goodput (requests meeting both the TTFT and the TPOT goal)."
        ),
    )
    parser.add_argument("--url", required=True, help=URL_HELP)
    parser.add_argument("--model", help="model name (default: the first one in /v1/models)")
    parser.add_argument(
        "--concurrency",
        type=_levels,
        default=(1, 2, 4, 8),
        metavar="N,...",
        help="concurrency levels (default 1,2,4,8)",
    )
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=256,
        metavar="P",
        help="prompt length in tokens (default %(default)s)",
    )
    parser.add_argument(
        "--output-tokens",
        type=int,
        default=128,
        metavar="O",
        help="tokens generated per request (default %(default)s)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        metavar="R",
        help="requests per level (default 4 x concurrency, at least 8)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=60.0,
        metavar="S",
        help="no new request after S seconds in a level (default %(default)s)",
    )
    parser.add_argument(
        "--ttft-slo",
        type=float,
        default=1.0,
        metavar="S",
        help="time-to-first-token goal in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--tpot-slo",
        type=float,
        default=0.05,
        metavar="S",
        help="time-per-output-token goal in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--api",
        choices=("completions", "chat"),
        default="completions",
        help="endpoint to load (default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="per-request limit in seconds (default %(default)s)",
    )
    parser.add_argument(
        "--api-key-env", metavar="VAR", help="read the API key from this environment variable"
    )
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow a target that is not this machine"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def _config(args: argparse.Namespace) -> LoadTestConfig:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise LoadTestError(
                f"environment variable {args.api_key_env} is not set; export the API key there"
            )
    return load_test_config(
        args.url,
        model=args.model,
        concurrency_levels=tuple(args.concurrency),
        prompt_tokens=args.prompt_tokens,
        output_tokens=args.output_tokens,
        requests_per_level=args.requests,
        duration_s=args.duration,
        ttft_slo_s=args.ttft_slo,
        tpot_slo_s=args.tpot_slo,
        api=args.api,
        api_key=api_key,
        allow_remote=args.allow_remote,
        request_timeout_s=args.timeout,
    )


def run(args: argparse.Namespace) -> int:
    """Run the load test; see the module docstring for the exit status."""
    config = _config(args)

    last_level = [0]

    def progress(p: LoadTestProgress) -> None:
        if p.level_index != last_level[0]:  # a new level starts on a new line
            print(file=sys.stderr)
            last_level[0] = p.level_index
        print(
            f"\rconcurrency {p.concurrency} ({p.level_index + 1}/{p.levels_total}): "
            f"{p.completed}/{p.planned} done, {p.errors} errors, {p.elapsed_s:.1f} s",
            end="",
            file=sys.stderr,
            flush=True,
        )

    # GPU 0 sampled at 10 Hz for the test; kept with its run when kvpilot serves there
    report = run_recorded_load_test(
        config, on_progress=None if args.json else progress, data_dir=paths.data_dir(),
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(file=sys.stderr)
        print(format_report(report))
    if report.server_lost is not None:
        print(f"kvpilot bench: {report.server_lost}", file=sys.stderr)
        return 1
    if report.levels and all(lv.requests_ok == 0 for lv in report.levels):
        return 1
    return 0
