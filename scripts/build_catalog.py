#!/usr/bin/env python3
"""Rebuild catalog entries from the Hugging Face Hub (or from public copies) into catalog.json.

    python scripts/build_catalog.py SOURCES.json [--copies DIR] [--catalog resources/catalog.json]
                                    [--only ID] [--dry-run]

SOURCES.json lists the models (``{"models": [{"id": "Qwen/Qwen3-8B", "family": "Qwen3"}]}``,
see :class:`kvpilot.core.hub.catalog_build.BuildSource`). Without ``--copies`` each is read from
the Hub ``HF_ENDPOINT`` names (config.json at a pinned commit, safetensors counts, the model
tree's quantized variants); with it, from ``DIR/<org>__<name>/``. Built entries replace those of
the same id; the others are kept. ``--dry-run`` prints the entries instead of writing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    from kvpilot.core.base.paths import atomic_write_text
    from kvpilot.core.hub.catalog_build import (
        CatalogBuildError,
        entry_from_copies,
        entry_from_hub,
        load_sources,
        merge,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", type=Path)
    parser.add_argument("--copies", type=Path, help="folder of <org>__<name>/ copies")
    parser.add_argument("--catalog", type=Path, default=REPO / "resources" / "catalog.json")
    parser.add_argument("--only", action="append", help="build only this id (repeatable)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    try:
        sources = load_sources(args.sources)
        if args.only:
            wanted = {o.lower() for o in args.only}
            sources = tuple(s for s in sources if s.id.lower() in wanted)
        built = [entry_from_copies(s, args.copies) if args.copies else entry_from_hub(s)
                 for s in sources]
    except CatalogBuildError as err:
        print(f"build_catalog: {err.message}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps(built, indent=1))
        return 0
    catalog = json.loads(args.catalog.read_text(encoding="utf-8"))
    atomic_write_text(args.catalog, json.dumps(merge(catalog, built), indent=1,
                                               ensure_ascii=False) + "\n", mode=0o644)
    for entry in built:
        sizes = ", ".join(f"{c['scheme']} {c['weights_bytes'] / 2**30:.1f} GiB"
                          f"{'' if c['weights_source'] == 'catalog' else ' (estimate)'}"
                          for c in entry["checkpoints"])
        print(f"{entry['id']}: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
