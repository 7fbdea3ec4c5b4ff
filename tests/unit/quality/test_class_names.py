"""One class per name: no class name is defined twice under core/ and gui/.

Two classes with one name (a keyring consent and a relaunch option were both ``FallbackChoice``)
make an import, a docstring reference or a search for the name ambiguous to the reader."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from testpaths import REPO


def _class_definitions() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for folder in (REPO / "core", REPO / "gui"):
        for path in sorted(folder.rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{Path(path).relative_to(REPO)}:{node.lineno}")
    return where


def test_every_class_name_is_defined_once() -> None:
    twice = {name: places for name, places in _class_definitions().items() if len(places) > 1}
    assert twice == {}, f"class names defined more than once: {twice}"


def test_the_scan_sees_the_tree() -> None:
    names = _class_definitions()
    # classes this scan must find, one from each face, or it reads nothing
    assert "KeyringConsent" in names and "MainWindow" in names
