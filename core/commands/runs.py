"""``kvpilot runs``: the server runs kept in the data directory, one, or several side by side.

    kvpilot runs [--json]                  list (newest first)
    kvpilot runs show ID [--json]          one run: settings, capacity, load tests, telemetry
    kvpilot runs compare ID ID... [--json] side by side (best value of each figure marked *)

A damaged record is skipped with a warning on stderr; the rest are listed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvpilot.core.app.runs import compare_runs, list_runs, read_runs, run_store
from kvpilot.core.commands import Subparsers
from kvpilot.core.runs.compare import format_cell, format_comparison
from kvpilot.core.runs.record import RunRecord


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot runs``."""
    p = subparsers.add_parser(
        "runs", help="list, show and compare the server runs kept",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--data-dir", type=Path, help="kvpilot data directory")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    show = sub.add_parser("show", help="one run in full")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="one JSON document")
    cmp = sub.add_parser("compare", help="two or more runs side by side")
    cmp.add_argument("run_ids", metavar="ID", nargs="+")
    cmp.add_argument("--json", action="store_true", help="one JSON document")
    return p


def _line(rec: RunRecord) -> str:
    cap = rec.reported.get("kv_cache_tokens")
    best = rec.best_tokens_per_s
    ended = rec.state + (f" ({rec.failure_kind})" if rec.failure_kind else "")
    return (
        f"{rec.id}  {rec.started_at}  {ended:<10}  {rec.model}"
        + (f"  [{rec.profile}]" if rec.profile else "")
        + (f"  KV {cap:,} tokens" if isinstance(cap, int) else "")
        + (f"  best {best:,.0f} tok/s" if best is not None else "")
    )


def _show(rec: RunRecord) -> str:
    out = [
        f"run {rec.id}: {rec.model}" + (f" (profile {rec.profile})" if rec.profile else ""),
        f"  started {rec.started_at}, ended {rec.ended_at or '-'}: {rec.state}"
        + (f" ({rec.failure_kind}: {rec.failure_message})" if rec.failure_kind else ""),
        f"  vLLM {rec.runtime_version} at {rec.base_url or '-'} (from the {rec.source})",
        "  settings: " + ", ".join(f"{k} {v}" for k, v in sorted(rec.settings.items())
                                    if v is not None),
    ]
    for label, cap in (("predicted", rec.predicted), ("reported", rec.reported)):
        if cap:
            out.append(f"  {label}: " + ", ".join(f"{k} {v}" for k, v in sorted(cap.items())))
    if rec.startup_s is not None:
        out.append(f"  start-up {rec.startup_s:.1f} s")
    for swap in rec.swaps:  # a front's starts and wakes of this server
        out.append(f"  front {swap.get('kind')} {swap.get('at')}: {swap.get('reason')}; "
                   f"waited {swap.get('wait_s')} s, loaded in {swap.get('load_s')} s")
    for test in rec.load_tests:
        out.append(f"  load test {test.at} ({test.api}, {test.prompt_tokens} in / "
                   f"{test.output_tokens} out):")
        for lv in test.levels:
            extra = ""
            if lv.j_per_token is not None:
                extra += f", {lv.j_per_token:.3g} J/token"
            if lv.throttled:
                extra += f", THROTTLED ({', '.join(lv.throttle_reasons) or 'yes'})"
            out.append(
                f"    {lv.concurrency} users: {lv.output_tokens_per_s:,.1f} tok/s, "
                f"TTFT P50 {format_cell(lv.ttft_p50_s, 's')} P99 "
                f"{format_cell(lv.ttft_p99_s, 's')}, TPOT P50 {format_cell(lv.tpot_p50_s, 's')}"
                f" P99 {format_cell(lv.tpot_p99_s, 's')}, {lv.errors} errors{extra}"
            )
    for name, s in sorted(rec.telemetry.items()):
        out.append(f"  {name}: mean {format_cell(s.mean, s.unit)}, max "
                   f"{format_cell(s.max, s.unit)} ({len(s.y)} points)")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """List, show or compare; an unknown or damaged id is a user error (exit 2)."""
    if args.action == "show":
        (rec,) = read_runs([args.run_id], args.data_dir)
        print(json.dumps(rec.to_json(), indent=2) if args.json else _show(rec))
        return 0
    if args.action == "compare":
        table = compare_runs(read_runs(args.run_ids, args.data_dir)).comparison
        print(json.dumps(table.to_json(), indent=2) if args.json else format_comparison(table))
        return 0
    found = list_runs(args.data_dir)
    for w in found.warnings:
        print(f"kvpilot: warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps({"runs": [r.to_json() for r in found.records],
                          "warnings": list(found.warnings)}, indent=2))
    elif not found.records:
        print(f"kvpilot: no runs kept yet in {run_store(args.data_dir).folder}")
    else:
        for rec in found.records:
            print(_line(rec))
    return 0
