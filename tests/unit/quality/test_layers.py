"""The folders are the layers, and imports go down them.

``core/base`` (the vocabulary) imports nothing of kvpilot above it. The domain packages (every
other folder of ``core/`` except the application layer and ``commands``) import base and each
other, but no two of them both ways, and none of them the application layer, the command line or
the window. ``core/front`` (the one address in front of several profiles' servers) is a domain
too: the application layer reads the profiles and hands it how each launches. The application
layer (``core/app``, one module per user action) sits above the domains; ``core/commands`` and
``cli.py`` above it. ``core/`` holds only packages,
``cli.py`` and ``__init__.py``.

The window reaches core by one rule: a module of ``gui/`` imports ``kvpilot.core`` itself,
``kvpilot.core.base`` and ``kvpilot.core.app``. The modules listed in ``GUI_DIRECT`` still reach
domain packages directly; each entry names the packages, the table is checked both ways (a new
direct import fails, and so does an entry that is no longer used), so it only shrinks as the
window's calls move into ``core/app``.

Between core's folders every import counts: at module level, inside a function, and under
``TYPE_CHECKING``. For the window's rule an import under ``if TYPE_CHECKING:`` does not count: it
never runs, and a gui module may name a domain type in its annotations; what it calls and what
it constructs comes through ``kvpilot.core.app`` or ``kvpilot.core.base``.
"""

from __future__ import annotations

import ast
from pathlib import Path

from testpaths import REPO

CORE = REPO / "core"
GUI = REPO / "gui"
#: the folders of core/ that are not domain packages, lowest first after the domains
BASE, APP, COMMANDS = "base", "app", "commands"
APPLICATION = (APP,)
ABOVE_DOMAINS = (*APPLICATION, COMMANDS, "cli")
#: the only loose modules of core/
LOOSE = {"__init__", "cli"}

#: gui module (relative to gui/) -> the core domain packages it still imports directly
GUI_DIRECT: dict[str, frozenset[str]] = {
    "controllers/chat.py": frozenset({"chat"}),
    "dialogs/runtime_install.py": frozenset({"runtimes"}),
    "services.py": frozenset({"fit", "hardware", "hub", "runtimes", "telemetry", "vllm"}),
}


def _module_name(path: Path) -> str:
    top = "core" if path.is_relative_to(CORE) else "gui"
    rel = path.relative_to(REPO / top).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["kvpilot", top, *parts])


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            hidden |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return hidden


def _imports(path: Path, *, run_only: bool = False) -> set[str]:
    """Every kvpilot module ``path`` names in an import, resolved to full dotted names;
    ``run_only`` leaves out the imports under ``if TYPE_CHECKING:``."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    hidden = _type_checking_only(tree) if run_only else set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _module_name(path).split(".")
                keep = len(package) - node.level + (1 if path.name == "__init__.py" else 0)
                module = ".".join(package[:keep] + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return {name for name in found if name.startswith("kvpilot.")}


def _core_part(name: str) -> str | None:
    """The folder of core/ (or loose module) a dotted name lies in; None outside core."""
    parts = name.split(".")
    if parts[:2] != ["kvpilot", "core"] or len(parts) < 3:
        return None
    return parts[2]


def _existing(name: str) -> bool:
    """Whether a dotted name is a module or package (not a name imported from one)."""
    rel = Path(*name.split(".")[1:])
    return (REPO / rel.with_suffix(".py")).exists() or (REPO / rel / "__init__.py").exists()


def _sources(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _domains() -> list[str]:
    return sorted(
        p.name for p in CORE.iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in (BASE, *ABOVE_DOMAINS)
    )


def _package_edges() -> dict[str, set[str]]:
    """core folder -> the core folders its modules import (itself left out)."""
    edges: dict[str, set[str]] = {}
    for path in _sources(CORE):
        here = _core_part(_module_name(path))
        if here is None:
            continue
        for name in _imports(path):
            there = _core_part(name)
            if there is not None and there != here and _existing(f"kvpilot.core.{there}"):
                edges.setdefault(here, set()).add(there)
    return edges


def test_core_holds_only_packages_and_the_command_line() -> None:
    loose = sorted(p.name for p in CORE.glob("*.py") if p.stem not in LOOSE)
    assert loose == [], f"modules loose at the top of core/ (put each in its layer): {loose}"


def test_base_imports_nothing_above_it() -> None:
    above = sorted(
        f"{path.relative_to(REPO)}: {name}"
        for path in _sources(CORE / BASE)
        for name in _imports(path)
        if _core_part(name) != BASE
    )
    assert above == [], f"base must import nothing of kvpilot above it: {above}"


def test_no_two_domain_packages_import_each_other_both_ways() -> None:
    edges = _package_edges()
    domains = _domains()
    assert {"fit", "hardware", "hub", "models", "vllm"} <= set(domains)
    both = sorted(
        (a, b) for a in domains for b in domains
        if a < b and b in edges.get(a, set()) and a in edges.get(b, set())
    )
    assert both == [], f"domain packages that import each other both ways: {both}"


def test_domains_import_neither_the_application_nor_the_command_line() -> None:
    edges = _package_edges()
    up = sorted(
        f"{d} -> {sorted(edges.get(d, set()) & set(ABOVE_DOMAINS))}" for d in _domains()
        if edges.get(d, set()) & set(ABOVE_DOMAINS)
    )
    assert up == [], f"domain packages importing a layer above them: {up}"


def test_the_application_layer_imports_no_command_line() -> None:
    up = sorted(
        f"{path.relative_to(REPO)}: {name}"
        for package in APPLICATION if (CORE / package).is_dir()
        for path in _sources(CORE / package)
        for name in _imports(path)
        if _core_part(name) in (COMMANDS, "cli")
    )
    assert up == [], f"the application layer must not import the command line: {up}"


def _gui_direct() -> dict[str, frozenset[str]]:
    direct: dict[str, set[str]] = {}
    for path in _sources(GUI):
        for name in _imports(path, run_only=True):
            part = _core_part(name)
            if part is None or part in (BASE, APP) or not _existing(f"kvpilot.core.{part}"):
                continue
            direct.setdefault(str(path.relative_to(GUI)), set()).add(part)
    return {k: frozenset(v) for k, v in direct.items()}


def test_the_window_reaches_core_by_the_one_rule() -> None:
    direct = _gui_direct()
    new = {
        module: sorted(parts - GUI_DIRECT.get(module, frozenset()))
        for module, parts in direct.items()
        if parts - GUI_DIRECT.get(module, frozenset())
    }
    assert new == {}, (
        "gui modules reach core only through kvpilot.core.app and kvpilot.core.base; "
        f"these import domain packages directly (add the call to core/app): {new}"
    )


def test_the_window_exceptions_are_still_used() -> None:
    direct = _gui_direct()
    stale = {
        module: sorted(parts - direct.get(module, frozenset()))
        for module, parts in GUI_DIRECT.items()
        if parts - direct.get(module, frozenset())
    }
    assert stale == {}, f"GUI_DIRECT entries no longer imported; drop them: {stale}"


def test_dialogs_widgets_and_panels_live_in_their_folders() -> None:
    """The top of gui/ is the window (its app, main window, services, workers, bridge, formats);
    a dialog, a panel, a view or a set of widgets has its folder."""
    kinds = ("_dialog", "_panel", "_view", "_widgets", "_section")
    loose = sorted(p.name for p in GUI.glob("*.py") if p.stem.endswith(kinds))
    assert loose == [], f"move these into gui/dialogs, gui/panels or gui/widgets: {loose}"
    for folder in ("panels", "dialogs", "widgets", "controllers"):
        assert (GUI / folder / "__init__.py").exists(), f"gui/{folder}/ is missing"


def test_an_import_under_type_checking_does_not_count_for_the_window(tmp_path: Path) -> None:
    module = tmp_path / "panel.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "from kvpilot.core.base.plan import Verdict\n"
        "if TYPE_CHECKING:\n"
        "    from kvpilot.core.fit.budget import overhead_bytes\n"
        "if typing.TYPE_CHECKING:\n"
        "    from kvpilot.core.vllm.logparse import PhaseEvent\n"
        "def f() -> None:\n"
        "    from kvpilot.core.hub.cache import is_repo_id\n",
        encoding="utf-8",
    )
    run = {_core_part(n) for n in _imports(module, run_only=True)}
    every = {_core_part(n) for n in _imports(module)}
    assert run == {"base", "hub"}
    assert every == {"base", "fit", "hub", "vllm"}
