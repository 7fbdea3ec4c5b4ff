"""Record how long each module of the ``servers`` part took, for ``tests/run``'s streams.

``tests/conftest.py`` splits the tests that start servers into streams of whole modules, the
longest first, each to the stream with the fewest seconds so far. The seconds come from one
recorded run of that part:

    .venv/bin/python -m pytest --part servers --junitxml=/tmp/servers.xml
    .venv/bin/python scripts/record_server_streams.py /tmp/servers.xml

or, after ``tests/run`` (which keeps each stream's report in ``.cache``),

    .venv/bin/python scripts/record_server_streams.py .cache/pytest-servers-*.xml

writes ``tests/server_streams.json`` (module path -> seconds, setup and teardown included).
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "tests" / "server_streams.json"


def module_seconds(*junit_xml: Path) -> dict[str, float]:
    """Seconds per test module (``tests/...py``) in pytest JUnit XML reports (summed).

    Raises:
        ET.ParseError: the file is not XML.
        OSError: the file cannot be read.
    """
    totals: dict[str, float] = defaultdict(float)
    cases = [c for path in junit_xml for c in ET.parse(path).getroot().iter("testcase")]
    for case in cases:
        dotted = case.get("classname", "")
        parts = dotted.split(".")
        # a test in a class has the class name last; modules start with test_
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if not parts:
            continue
        totals["/".join(parts) + ".py"] += float(case.get("time", "0") or 0)
    return {name: round(seconds, 1) for name, seconds in sorted(totals.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml", type=Path, nargs="+",
                        help="pytest --junitxml reports of --part servers (its streams)")
    args = parser.parse_args(argv)
    try:
        seconds = module_seconds(*args.junit_xml)
    except (OSError, ET.ParseError) as exc:
        print(f"record_server_streams: cannot read the reports: {exc}", file=sys.stderr)
        return 2
    TARGET.write_text(json.dumps({"module_seconds": seconds}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(seconds)} modules, {sum(seconds.values()):.0f} s in all -> {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
