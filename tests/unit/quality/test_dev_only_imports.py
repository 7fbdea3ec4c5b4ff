"""Development dependencies stay out of the program: no module of core/ or gui/ imports a package
that only the tests use (prometheus_client is the oracle of the /metrics parser, and is in the
``dev`` extra, not in the dependencies a user installs)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    import tomli as tomllib

from testpaths import REPO

#: import names of packages the tests use as oracles or tools, never the program
DEV_ONLY = ("prometheus_client", "pytest", "pytestqt", "hypothesis", "jsonschema")


def _imported(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


def test_no_program_module_imports_a_dev_only_package() -> None:
    found = [
        f"{path.relative_to(REPO)}: {name}"
        for folder in ("core", "gui")
        for path in sorted((REPO / folder).rglob("*.py"))
        for name in _imported(path)
        if name.split(".")[0] in DEV_ONLY
    ]
    assert found == []


def test_prometheus_client_is_a_dev_dependency_only() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = " ".join(project["dependencies"]).lower()
    dev = " ".join(project["optional-dependencies"]["dev"]).lower()
    assert "prometheus" not in runtime
    assert "prometheus-client" in dev
