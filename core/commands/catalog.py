"""``kvpilot catalog``: the models and checkpoints the recommender ranks.

Contract::

    kvpilot catalog [--family NAME] [--gpu NAME] [--json]
    kvpilot catalog refresh [--limit N] [--json]

One row per model (id, family, release date, parameters) and one per checkpoint (quantization,
weight bytes and whether they are exact or the byte model's estimate). With ``--gpu`` the
checkpoints that card's compute capability cannot run are marked with the reason.

``refresh`` rebuilds the user's catalog from the Hub (the most downloaded and trending models of
the architectures the installed vLLM registers, their quantized uploads, sizes and dates) and
layers it over the shipped one; offline it says which catalog stays in use, with its date.
"""

from __future__ import annotations

import argparse
import json

from kvpilot.core.base.units import GiB
from kvpilot.core.commands import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "catalog", help="list the models and checkpoints the recommender ranks",
        description="List the bundled catalog: models, release dates, checkpoints and sizes.",
    )
    parser.add_argument("action", nargs="?", choices=["refresh"],
                        help="refresh: rebuild your catalog from the Hub")
    parser.add_argument("--limit", type=int, default=20,
                        help="refresh: models read per Hub listing (default 20)")
    parser.add_argument("--family", help="only this family (e.g. Qwen3, Gemma 3)")
    parser.add_argument("--gpu", help="mark checkpoints this card cannot run (e.g. 'RTX 4090')")
    parser.add_argument("--json", action="store_true")
    return parser


def _refresh(args: argparse.Namespace) -> int:
    import sys

    from kvpilot.core.app.search import refresh_catalog_here

    if args.limit < 1:
        print("catalog refresh: --limit must be 1 or more", file=sys.stderr)
        return 2
    result = refresh_catalog_here(args.limit, on_progress=None if args.json else print)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(result.message)
        for repo in result.added:
            print(f"   new: {repo}")
        for repo, why in result.skipped:
            print(f"   skipped {repo}: {why}")
    return 0 if result.online else 1


def run(args: argparse.Namespace) -> int:
    from kvpilot.core.models.catalog import catalog_date
    from kvpilot.core.models.catalog_list import catalog_listing, listing_to_json

    if args.action == "refresh":
        return _refresh(args)
    cc = None
    if args.gpu:
        from kvpilot.core.hardware.target import from_spec

        cc = from_spec(args.gpu).compute_capability
    models = catalog_listing(cc, args.family)
    if args.json:
        print(json.dumps({"models": listing_to_json(models), "catalog_date": catalog_date()},
                         indent=2))
        return 0 if models else 1
    total = sum(len(m.checkpoints) for m in models)
    lines = [f"{len(models)} models, {total} checkpoints (catalog of {catalog_date()})"]
    for m in models:
        e = m.entry
        params = f"{e.params_total / 1e9:.1f}B parameters" if e.params_total \
            else "parameters not counted yet"
        lines.append(f"\n{e.id}  ({e.family}, released {e.release_date or 'date not recorded'}, "
                     f"{params}, {e.context_length:,} context)")
        for c in m.checkpoints:
            size = f"{c.weights_bytes / GiB:6.2f} GiB" if c.weights_bytes else "size unknown"
            how = "" if c.weights_source == "catalog" or not c.weights_bytes \
                else " (byte-model estimate)"
            mark = f"   refused: {c.refused}" if c.refused else (
                f"   note: {c.note}" if c.note else "")
            lines.append(f"   {c.repo:56} {c.scheme:9} {size}{how}{mark}")
    if not models:
        lines.append("no model of that family; `kvpilot catalog` lists all")
    print("\n".join(lines))
    return 0 if models else 1
