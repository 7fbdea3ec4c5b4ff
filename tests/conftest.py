"""Suite-wide pytest set-up: Qt offscreen, the tests folder importable (``fakes``, helpers)."""

from __future__ import annotations

import functools
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


# tests/run runs the suite as two pytest processes side by side (``--part``): the tests that start
# servers, vLLM engines or an X server run one after another in one of them (they bind ports found
# free a moment before, share the tiny checkpoint and the CPU engine's cores, and several judge
# time); everything else runs in the other.
SERVER_DIRS = ("e2e", "faults", "system")
SERVER_FIXTURES = frozenset({"vllm_runtime", "tiny_model", "vllm_server", "vllm_scratch"})
SERVER_WORDS = (
    "fake_vllm", "find_free_port", "FAKE_VLLM", "xwindow", "Xvfb", "ThreadingHTTPServer",
)
PARTS = ("servers", "others")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part", choices=PARTS, default=None,
        help="only the tests that start servers (servers) or only the others (others)",
    )


@functools.cache
def _module_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def part_of(item: pytest.Item) -> str:
    """``servers`` for a test that starts a server, an engine or an X server, else ``others``."""
    path = Path(str(item.fspath)).resolve()
    parts = path.relative_to(TESTS_DIR).parts if TESTS_DIR in path.parents else ()
    if parts and parts[0] in SERVER_DIRS:
        return "servers"
    if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "servers"
    text = _module_text(path)
    return "servers" if any(word in text for word in SERVER_WORDS) else "others"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--part``, keep only that part's tests."""
    wanted = config.getoption("--part")
    if wanted is None:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if part_of(item) == wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
