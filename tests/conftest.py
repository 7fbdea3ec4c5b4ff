"""Suite-wide pytest set-up: Qt offscreen, the tests folder importable (``fakes``, helpers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))
