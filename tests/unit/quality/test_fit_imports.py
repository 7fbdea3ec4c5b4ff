"""The fit engine reads no device: no module of core/fit imports the GPU probe, NVML or psutil,
neither at import time nor inside a function; its readings come in as plain records."""

from __future__ import annotations

import ast
import subprocess
import sys

from testpaths import REPO

FIT = REPO / "core" / "fit"
#: modules that read the machine; the fit engine gets their figures as plain values
DEVICE_MODULES = ("kvpilot.core.hardware.probe", "kvpilot.core.hardware.nvml",
                  "kvpilot.core.hardware.sampler", "kvpilot.core.hardware.system",
                  "psutil", "pynvml")


def _fit_modules() -> list[str]:
    return sorted(
        "kvpilot.core.fit" + ("" if p.stem == "__init__" else f".{p.stem}")
        for p in FIT.glob("*.py")
    )


def test_no_fit_module_names_a_device_module() -> None:
    found = []
    for path in sorted(FIT.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            found += [f"{path.name}: {n}" for n in names if n.startswith(DEVICE_MODULES)]
    assert found == []


def test_importing_every_fit_module_loads_no_device_module() -> None:
    modules = _fit_modules()
    assert "kvpilot.core.fit.budget_now" in modules and len(modules) > 10
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted(m for m in sys.modules if m.startswith({DEVICE_MODULES!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
