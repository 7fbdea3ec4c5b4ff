"""Every package of the source tree is in pyproject.toml's package list: an editable install
finds any folder, but a wheel, and so the packaged executable, holds only the listed ones (a
missing one left ``kvpilot runs`` and the Chat tab out of the bundle)."""

from __future__ import annotations

import tomllib
from testpaths import REPO


def test_every_package_folder_is_listed() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = project["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for dotted, folder in setuptools["package-dir"].items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            parts = init.parent.relative_to(root).parts
            found.add(".".join((dotted, *parts)))
    assert found, "no package folder found: the package-dir table moved?"
    assert sorted(found - listed) == []
    assert sorted(listed - found) == []
