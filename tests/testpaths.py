"""Where the test suite's own files are, for tests anywhere below ``tests/``.

Tests name these instead of counting ``Path(__file__).parents``, so that a test file can move to
the place that mirrors the module it tests without its data paths breaking.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: the ``tests/`` folder
TESTS = Path(__file__).resolve().parent
#: the repository root
REPO = TESTS.parent
#: recorded inputs: model configs, vLLM logs, /metrics payloads, NVML snapshots
DATA = TESTS / "data"


def load_script(path: Path, name: str) -> ModuleType:
    """The module of a script outside the package (a benchmark), imported under ``name`` and
    registered in ``sys.modules`` (its dataclasses look themselves up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
