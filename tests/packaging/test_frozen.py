"""The PyInstaller executable: built once per session (or reused), then smoke-tested.

The bundle is built with ``packaging/build.py`` into a temporary folder and kept in
``.cache/packaging/bundles/<source hash>/``; a later session with the same sources, resources,
spec and Python reuses it instead of building again. The first build of a clean checkout also
creates the build environment (dependencies and PyInstaller from PyPI, about two minutes on two
cores).

``KVPILOT_SKIP_PACKAGING=1`` skips the executable's tests (for quick local runs); CI runs them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGING = REPO_ROOT / "packaging"
BUNDLES = REPO_ROOT / ".cache" / "packaging" / "bundles"
KEEP_BUNDLES = 2
SKIP_ENV = "KVPILOT_SKIP_PACKAGING"

pytestmark = pytest.mark.timeout(1200)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"kvpilot_packaging_{name}", PACKAGING / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


build_mod = _load("build")
smoke_mod = _load("smoke")


def _skip_if_asked() -> None:
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the executable is not built in this run")


def _prune(keep: Path) -> None:
    """Keep the newest bundles only (each is ~200 MiB)."""
    others = sorted(
        (p for p in BUNDLES.iterdir() if p.is_dir() and p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[KEEP_BUNDLES - 1 :]:
        shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="session")
def frozen_exe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built executable (onedir), from the cache when the sources have not changed."""
    _skip_if_asked()
    digest = build_mod.source_hash(REPO_ROOT)
    cached = BUNDLES / digest
    exe = cached / "kvpilot" / "kvpilot"
    if (cached / ".complete").is_file() and exe.is_file():
        os.utime(cached)
        print(f"\nfrozen: reusing the bundle built from sources {digest}")
        return exe
    dist = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    try:
        result = build_mod.build(dist, tarball=False)
    except build_mod.BuildError as exc:
        pytest.fail(f"building the executable failed: {exc}")
    print(
        f"\nfrozen: built in {time.monotonic() - started:.0f} s "
        f"(environment {result.venv_s} s, PyInstaller {result.pyinstaller_s} s), "
        f"{result.bundle_bytes / 2**20:.0f} MiB"
    )
    partial = BUNDLES / f"{digest}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(dist / "kvpilot", partial / "kvpilot", symlinks=True)
    (partial / ".complete").write_text(result.source_hash + "\n")
    shutil.rmtree(cached, ignore_errors=True)
    partial.rename(cached)
    _prune(keep=cached)
    return exe


@pytest.fixture(scope="session")
def smoke_context(frozen_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One smoke-test context (clean XDG/HF dirs) shared by the checks; prints the timings."""
    ctx = smoke_mod.Context(
        exe=frozen_exe,
        expect_version=build_mod.project_version(REPO_ROOT),
        home=tmp_path_factory.mktemp("smoke-home"),
    )
    yield ctx
    sizes = f"bundle {smoke_mod.bundle_bytes(frozen_exe) / 2**20:.1f} MiB"
    times = ", ".join(f"{k} {v:.2f}" for k, v in ctx.timings_s.items())
    print(f"\nfrozen: {sizes}; {times}")


@pytest.mark.parametrize("check", list(smoke_mod.CHECKS))
def test_frozen_executable(smoke_context: object, check: str) -> None:
    """Each smoke check (``packaging/smoke.py``) passes on the built executable."""
    try:
        smoke_mod.CHECKS[check](smoke_context)
    except smoke_mod.SmokeFailure as exc:
        pytest.fail(str(exc), pytrace=False)
    except smoke_mod.SmokeSkip as exc:
        pytest.skip(str(exc))


def test_tarball_unpacks_into_a_runnable_app(frozen_exe: Path, tmp_path: Path) -> None:
    """The tarball holds one ``kvpilot/`` folder whose executable runs where unpacked.

    It is made by the release code with gzip (seconds) instead of the release's xz -9 (about
    100 s on two cores for the whole bundle); the xz path is checked on a small folder below and
    the release archive's size by ``benchmarks/packaging_footprint.py``."""
    tarball = build_mod.make_tarball(frozen_exe.parent, tmp_path / "kvpilot.tar.gz")
    with tarfile.open(tarball) as tar:
        tops = {m.name.split("/", 1)[0] for m in tar.getmembers()}
        assert tops == {"kvpilot"}
        tar.extractall(tmp_path / "unpacked", filter="tar")
    unpacked = tmp_path / "unpacked" / "kvpilot" / "kvpilot"
    proc = subprocess.run(
        [str(unpacked), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"kvpilot {build_mod.project_version(REPO_ROOT)}"
    # the way the README installs it: a link on PATH to the unpacked executable
    link = tmp_path / "bin" / "kvpilot"
    link.parent.mkdir()
    link.symlink_to(unpacked)
    proc = subprocess.run(
        [str(link), "plan", "--model", smoke_mod.PLAN_MODEL, "--gpu", smoke_mod.PLAN_GPU],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert smoke_mod.PLAN_MODEL in proc.stdout


def test_release_tarball_is_xz_with_one_top_folder(tmp_path: Path) -> None:
    """The release suffix gives an xz archive (preset 9) of the folder under its own name, and
    no half-written archive is left beside it."""
    bundle = tmp_path / "kvpilot"
    (bundle / "_internal").mkdir(parents=True)
    (bundle / "kvpilot").write_bytes(b"\x7fELF" + bytes(4096))
    (bundle / "_internal" / "base_library.zip").write_bytes(b"PK" * 5000)
    target = tmp_path / "out" / f"kvpilot-1.0-linux-x86_64{build_mod.TARBALL_SUFFIX}"
    target.parent.mkdir()
    made = build_mod.make_tarball(bundle, target)
    assert made == target and target.read_bytes()[:6] == b"\xfd7zXZ\x00"
    with tarfile.open(target, "r:xz") as tar:
        names = sorted(m.name for m in tar.getmembers())
    assert names == [
        "kvpilot", "kvpilot/_internal", "kvpilot/_internal/base_library.zip", "kvpilot/kvpilot"
    ]
    assert [p.name for p in target.parent.iterdir()] == [target.name]
    assert target.stat().st_size < 2000  # 14 KB of repeats: xz, not a plain tar


def test_source_hash_follows_sources_not_caches(tmp_path: Path) -> None:
    """The cache key changes with a source or spec edit, not with __pycache__ or tests."""
    for rel in (
        "core/a.py",
        "gui/b.py",
        "resources/c.json",
        "pyproject.toml",
        "README.md",
        "packaging/kvpilot.spec",
        "packaging/kvpilot_main.py",
        "packaging/build.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"# {rel}\n")
    first = build_mod.source_hash(tmp_path)
    (tmp_path / "core" / "__pycache__").mkdir()
    (tmp_path / "core" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("x = 1\n")
    (tmp_path / "packaging" / "smoke.py").write_text("y = 2\n")
    assert build_mod.source_hash(tmp_path) == first
    (tmp_path / "resources" / "c.json").write_text("{}\n")
    second = build_mod.source_hash(tmp_path)
    assert second != first
    (tmp_path / "packaging" / "kvpilot.spec").write_text("# changed\n")
    assert build_mod.source_hash(tmp_path) not in (first, second)
