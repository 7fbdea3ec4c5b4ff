"""Suite-wide pytest set-up: Qt offscreen, the tests folder importable (``fakes``, helpers)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# the debug check that every Qt object is used on its own thread (kvpilot.gui.threadcheck) is on
# in every test and in every app a test starts
os.environ.setdefault("KVPILOT_QT_THREAD_CHECK", "1")


@pytest.fixture(autouse=True)
def qt_objects_on_their_own_threads() -> Iterator[None]:
    """Fail a test in whose run a Qt object was used from a thread other than its own."""
    if "PySide6.QtCore" in sys.modules:
        from kvpilot.gui import threadcheck

        threadcheck.install()
    yield
    check = sys.modules.get("kvpilot.gui.threadcheck")
    if check is not None:
        seen = check.take_violations()
        if seen:
            pytest.fail("a Qt object was used off its thread:\n" + "\n".join(seen))
