"""The package's module graph has no cycle, and core never imports Qt or the GUI.

Every ``import`` / ``from ... import`` of a kvpilot module counts, also those inside functions
(a lazy import still ties the two modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

from testpaths import REPO

PACKAGES = {"kvpilot.core": REPO / "core", "kvpilot.gui": REPO / "gui",
            "kvpilot.resources": REPO / "resources"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kvpilot"):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("kvpilot"))
    return {m for m in out if m in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, known) - {name} for name, path in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_core_imports_neither_qt_nor_the_gui() -> None:
    for name, path in _modules().items():
        if not name.startswith("kvpilot.core"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for imported in names:
                assert not imported.startswith(("PySide6", "pyqtgraph", "kvpilot.gui")), (
                    f"{name} imports {imported}"
                )


def test_every_error_kvpilot_raises_joins_one_tree() -> None:
    """Each exception class defined in core derives from KvpilotError (one-line message, exit
    code 2 in the CLI, a message box in the GUI); only the stand-in for NVIDIA's own pynvml
    errors (core/hardware/recorded_nvml.py) mirrors that library instead."""
    import importlib
    import inspect

    from kvpilot.core.base.errors import KvpilotError

    outside = []
    for name, path in _modules().items():
        if not name.startswith("kvpilot.core") or name.endswith("recorded_nvml"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not classes:
            continue
        module = importlib.import_module(name)
        for cls_name in classes:
            cls = getattr(module, cls_name)
            is_error = inspect.isclass(cls) and issubclass(cls, BaseException)
            if is_error and not issubclass(cls, KvpilotError):
                outside.append(f"{name}.{cls_name}")
    assert outside == []
