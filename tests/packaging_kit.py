"""Helpers the packaging tests share: the packaging scripts as modules, the bundle under test."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGING = REPO_ROOT / "packaging"


def load_packaging(name: str) -> ModuleType:
    """``packaging/<name>.py`` as a module (the folder is not a package)."""
    module_name = f"kvpilot_packaging_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, PACKAGING / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class FrozenBuild:
    """The bundle under test: its executable and the base it was built on."""

    exe: Path
    base: str  # "debian11" or "host"
    why_host: str  # what was missing for the old base ("" when built there)
