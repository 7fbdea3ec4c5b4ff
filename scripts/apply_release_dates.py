#!/usr/bin/env python3
"""Write each catalog entry's release date and its source into resources/catalog.json.

    python scripts/apply_release_dates.py [--dates scripts/catalog_release_dates.json]
                                          [--catalog resources/catalog.json]

Every entry gets ``release_date`` (ISO ``YYYY-MM-DD`` or ``YYYY-MM``; "" when no public source
gave one) and ``release_date_source`` (the page it was read from, or the sentence saying that
no date was found).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
UNKNOWN = "date unknown: no public source for this model's release was read"


def apply(catalog: dict, dates: dict) -> tuple[int, int]:
    """Set the dates of ``catalog``'s entries in place; (dated, unknown) counts."""
    sources = dates["sources"]
    table = {k.lower(): v for k, v in dates["dates"].items()}
    dated = unknown = 0
    for entry in catalog["entries"]:
        row = table.get(entry["id"].lower())
        if row is None:
            entry["release_date"] = ""
            entry["release_date_source"] = UNKNOWN
            unknown += 1
            continue
        date, key, note = row
        entry["release_date"] = date
        entry["release_date_source"] = sources[key] + (f" ({note})" if note else "")
        dated += 1
    return dated, unknown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dates", type=Path,
                        default=REPO / "scripts" / "catalog_release_dates.json")
    parser.add_argument("--catalog", type=Path, default=REPO / "resources" / "catalog.json")
    args = parser.parse_args(argv)
    catalog = json.loads(args.catalog.read_text(encoding="utf-8"))
    dated, unknown = apply(catalog, json.loads(args.dates.read_text(encoding="utf-8")))
    args.catalog.write_text(json.dumps(catalog, indent=1, ensure_ascii=False) + "\n",
                            encoding="utf-8")
    print(f"{dated} entries dated, {unknown} without a sourced date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
