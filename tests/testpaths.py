"""Where the test suite's own files are, for tests anywhere below ``tests/``.

Tests name these instead of counting ``Path(__file__).parents``, so that a test file can move to
the place that mirrors the module it tests without its data paths breaking.
"""

from __future__ import annotations

from pathlib import Path

#: the ``tests/`` folder
TESTS = Path(__file__).resolve().parent
#: the repository root
REPO = TESTS.parent
#: recorded inputs: model configs, vLLM logs, /metrics payloads, NVML snapshots
DATA = TESTS / "data"
