"""The PyInstaller executable: built once per session (or reused), then smoke-tested.

The bundle is built with ``packaging/build.py`` into a temporary folder and kept in
``.cache/packaging/bundles/<source hash>/``; a later session with the same sources, resources,
spec and Python reuses it instead of building again. The first build of a clean checkout also
creates the build environment (dependencies and PyInstaller from PyPI, about two minutes on two
cores).

``KVPILOT_SKIP_PACKAGING=1`` skips the executable's tests (for quick local runs); CI runs them.
"""

from __future__ import annotations

import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging_kit import REPO_ROOT, load_packaging

pytestmark = pytest.mark.timeout(1800)

build_mod = load_packaging("build")
smoke_mod = load_packaging("smoke")


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
