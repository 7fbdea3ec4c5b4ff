#!/usr/bin/env python3
"""The README's "what to run on your card" table: the top plan per card class and use case.

    python scripts/readme_top_plans.py [--write]

Each card class is planned from a recorded NVML snapshot (``resources/nvml_*.json``: 16, 24 and
32 GB) or, where none is recorded (12 GB), from the GPU spec table; each use case with its
recommender goal. The table names the top plan, its published quality figure and where that
figure was read. ``--write`` replaces the table between the README's markers.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- top-plans:begin -->", "<!-- top-plans:end -->"
#: (label, NVML snapshot or None, GPU spec name when no snapshot is recorded)
CARDS = (
    ("12 GB (RTX 4070 Ti, spec table: no recorded snapshot)", None, "RTX 4070 Ti"),
    ("16 GB (rtx4080 snapshot)", "rtx4080", None),
    ("24 GB (rtx4090-desktop snapshot)", "rtx4090-desktop", None),
    ("32 GB (rtx5090 snapshot)", "rtx5090", None),
)
GOALS = (
    ("chat 8k x 4", ["--use-case", "chat", "--context", "8k", "--users", "4"]),
    ("long documents 32k x 1", ["--use-case", "long-docs", "--context", "32k", "--users", "1"]),
    ("batch", ["--use-case", "batch"]),
    ("coding 32k x 1", ["--use-case", "coding", "--context", "32k", "--users", "1"]),
)


def top_plan(snapshot: str | None, gpu: str | None, goal: list[str]) -> dict | None:
    """The first candidate of ``kvpilot recommend --json`` (None when nothing fits)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("KVPILOT_FAKE_NVML", None)
    if snapshot:
        env["KVPILOT_FAKE_NVML"] = snapshot
    cmd = [sys.executable, "-m", "kvpilot.core.cli", "recommend", *goal, "--json"]
    if gpu:
        cmd[4:4] = ["--gpu", gpu]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    try:
        cands = json.loads(out.stdout)["candidates"]
    except (ValueError, KeyError):
        return None
    return cands[0] if cands else None


def table() -> str:
    rows = ["| card | use case | top plan | quality (benchmark, source) |", "|---|---|---|---|"]
    for label, snapshot, gpu in CARDS:
        for goal_label, goal in GOALS:
            top = top_plan(snapshot, gpu, goal)
            if top is None:
                rows.append(f"| {label} | {goal_label} | nothing fits | |")
                continue
            q = top.get("quality", {})
            figure = (f"{q['score']} on {q['benchmark']} ({q.get('date') or 'undated'}), "
                      f"{q['source']}" if q.get("score") is not None
                      else f"unrated ({q.get('source', '')})")
            if q.get("score") is not None and q.get("recovery"):
                figure += (f"; {q['raw_score']} times the {q.get('recovery_kind') or 'published'} "
                           f"recovery {q['recovery']}")
            rows.append(f"| {label} | {goal_label} | `{top['model']}` "
                        f"({top['kv_cache_dtype']} KV, {top['max_model_len']:,} tokens) "
                        f"| {figure} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update README.md in place")
    args = parser.parse_args(argv)
    text = table()
    if not args.write:
        print(text)
        return 0
    readme = REPO / "README.md"
    body = readme.read_text(encoding="utf-8")
    if BEGIN not in body or END not in body:
        print(f"README.md has no {BEGIN} ... {END} markers", file=sys.stderr)
        return 2
    head, rest = body.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")
    print(f"README.md: {len(text.splitlines()) - 2} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
