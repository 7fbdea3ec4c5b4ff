"""Suite-wide pytest set-up: Qt offscreen, the tests folder importable (``fakes``, helpers)."""

from __future__ import annotations

import functools
import json
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


# tests/run runs the suite as pytest processes side by side (``--part``): the tests that start
# servers, vLLM engines or an X server run one after another within each of the ``servers``
# streams (``--stream K/N``; a stream takes whole modules, balanced by the seconds each module took
# in a recorded run, ``tests/server_streams.json``), each stream on ports of its own
# (``tests/ports.py``); everything else runs in the ``others`` part alongside.
SERVER_DIRS = ("e2e", "faults", "system")
SERVER_FIXTURES = frozenset({"vllm_runtime", "tiny_model", "vllm_server", "vllm_scratch"})
SERVER_WORDS = (
    "fake_vllm", "free_port", "FAKE_VLLM", "xwindow", "Xvfb", "ThreadingHTTPServer",
)
PARTS = ("servers", "others")
STREAM_SECONDS = TESTS_DIR / "server_streams.json"
UNTIMED_MODULE_S = 30.0  # a module the recorded run did not see counts as one vLLM start
PORTS_PER_STREAM = 3000  # the tests name ports from 18000 to 20600


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part", choices=PARTS, default=None,
        help="only the tests that start servers (servers) or only the others (others)",
    )
    parser.addoption(
        "--stream", default=None, metavar="K/N",
        help="with --part servers: only the K-th of N streams of whole modules (1/2, 2/2)",
    )


def _stream(config: pytest.Config) -> tuple[int, int] | None:
    text = config.getoption("--stream")
    if not text:
        return None
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise pytest.UsageError(f"--stream {text}: give it as K/N, e.g. 1/2") from None
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--stream {text}: K must be from 1 to N")
    return k, n


#: vLLM's CPU build pins each worker's OpenMP threads, and with them the worker's import and
#: start-up, to the first core of its NUMA node ("auto", vllm/utils/ompmultiprocessing.py), so
#: every CPU server these tests start shares core 0 of this two-core machine while the other core
#: stays reserved. Unpinned, two servers starting at once were ready in 32-49 s instead of 57-65 s
#: (a lone start is unchanged, 28 s).
VLLM_CPU_BINDING = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def pytest_configure(config: pytest.Config) -> None:
    """Give this process's stream its own block of ports (``tests/ports.py``), and the CPU
    servers it starts no core pinning (:data:`VLLM_CPU_BINDING`)."""
    for key, value in VLLM_CPU_BINDING.items():
        os.environ.setdefault(key, value)
    stream = _stream(config)
    if stream is not None:
        os.environ["KVPILOT_TEST_PORT_OFFSET"] = str((stream[0] - 1) * PORTS_PER_STREAM)


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


def _module_of(item: pytest.Item) -> str:
    path = Path(str(item.fspath)).resolve()
    return path.relative_to(REPO_ROOT).as_posix() if REPO_ROOT in path.parents else str(path)


# Two streams are the default (tests/run, KVPILOT_TEST_SERVER_STREAMS=2). What made them disturb
# each other before: every CPU server was pinned to core 0 (VLLM_CPU_BINDING above), so the
# front's backends loaded in 55-66 s instead of about 25 s; a front test bounded a reply by wall
# time; a dialog closed late by a key press failed the next press (tests/xwindow.py).
#: modules that must share one stream: kvpilot's front picks its backends' ports itself, the
#: first free from 18100 (core/front/pool.py PORT_BASE), so two fronts at once would race there
SAME_STREAM = {
    "tests/e2e/test_front_e2e.py": "front",
    "tests/gui/controllers/test_front.py": "front",
    "tests/unit/commands/test_front.py": "front",
    "tests/unit/front/test_pool_fake.py": "front",
}


def split_streams(modules: list[str], seconds: dict[str, float], count: int) -> dict[str, int]:
    """Each module's stream (0-based): the longest first, each to the stream with the fewest
    seconds so far (ties to the lower stream; names break ties in length, so it is stable).
    The modules of one :data:`SAME_STREAM` group go together, as one unit."""
    units: dict[str, list[str]] = {}
    for module in sorted(set(modules)):
        units.setdefault(SAME_STREAM.get(module, module), []).append(module)

    def unit_s(unit: str) -> float:
        return sum(seconds.get(m, UNTIMED_MODULE_S) for m in units[unit])

    loads = [0.0] * count
    chosen: dict[str, int] = {}
    for unit in sorted(units, key=lambda u: (-unit_s(u), u)):
        k = min(range(count), key=lambda i: (loads[i], i))
        for module in units[unit]:
            chosen[module] = k
        loads[k] += unit_s(unit)
    return chosen


def _recorded_seconds() -> dict[str, float]:
    try:
        data = json.loads(STREAM_SECONDS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("module_seconds", {}).items()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--part``, keep only that part's tests (and with ``--stream``, that stream's)."""
    wanted = config.getoption("--part")
    if wanted is None:
        return
    stream = _stream(config) if wanted == "servers" else None
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if part_of(item) == wanted else dropped).append(item)
    if stream is not None:
        k, n = stream
        modules = [_module_of(i) for i in kept]
        chosen = split_streams(modules, _recorded_seconds(), n)
        mine = [chosen[m] == k - 1 for m in modules]
        dropped += [i for i, ok in zip(kept, mine, strict=True) if not ok]
        kept = [i for i, ok in zip(kept, mine, strict=True) if ok]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
