"""``kvpilot catalog``: the models and checkpoints the recommender ranks.

Contract::

    kvpilot catalog [--family NAME] [--gpu NAME] [--json]

One row per model (id, family, release date, parameters) and one per checkpoint (quantization,
weight bytes and whether they are exact or the byte model's estimate). With ``--gpu`` the
checkpoints that card's compute capability cannot run are marked with the reason.
"""

from __future__ import annotations

import argparse
import json

from kvpilot.core.commands import Subparsers
from kvpilot.core.units import GiB


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "catalog", help="list the models and checkpoints the recommender ranks",
        description="List the bundled catalog: models, release dates, checkpoints and sizes.",
    )
    parser.add_argument("--family", help="only this family (e.g. Qwen3, Gemma 3)")
    parser.add_argument("--gpu", help="mark checkpoints this card cannot run (e.g. 'RTX 4090')")
    parser.add_argument("--json", action="store_true")
    return parser


def run(args: argparse.Namespace) -> int:
    from kvpilot.core.models.catalog_list import catalog_listing, listing_to_json

    cc = None
    if args.gpu:
        from kvpilot.core.hardware.target import from_spec

        cc = from_spec(args.gpu).compute_capability
    models = catalog_listing(cc, args.family)
    if args.json:
        print(json.dumps({"models": listing_to_json(models)}, indent=2))
        return 0 if models else 1
    total = sum(len(m.checkpoints) for m in models)
    lines = [f"{len(models)} models, {total} checkpoints"]
    for m in models:
        params = f"{m.params_total / 1e9:.1f}B parameters" if m.params_total \
            else "parameters not counted yet"
        lines.append(f"\n{m.id}  ({m.family}, released {m.release_date or 'date not recorded'}, "
                     f"{params}, {m.context_length:,} context)")
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
