"""The executable the packaging tests share: built once per session (or reused from
``.cache/packaging/bundles/<source hash>/``).

Where this machine can make the Debian 11 build root (root, ``debootstrap``, ``unshare``), the
bundle is the release build, made in that root (packaging/oldbase.py; the root is cached outside
the checkout). Elsewhere it is built on this machine's own base, and the tests that need the old
base skip, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from packaging_kit import REPO_ROOT, FrozenBuild, load_packaging

BUNDLES = REPO_ROOT / ".cache" / "packaging" / "bundles"
KEEP_BUNDLES = 2
SKIP_ENV = "KVPILOT_SKIP_PACKAGING"


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
def frozen_build(tmp_path_factory: pytest.TempPathFactory) -> FrozenBuild:
    """The built executable (onedir), from the cache when the sources have not changed."""
    _skip_if_asked()
    build_mod = load_packaging("build")
    oldbase = load_packaging("oldbase")
    missing = oldbase.missing_tools()
    base = "host" if missing else "debian11"
    why = "; ".join(missing)
    if missing:
        print(f"\nfrozen: building on this machine's base; the Debian 11 root needs {why}")
    digest = build_mod.source_hash(REPO_ROOT, base)
    cached = BUNDLES / digest
    exe = cached / "kvpilot" / "kvpilot"
    if (cached / ".complete").is_file() and exe.is_file():
        os.utime(cached)
        print(f"\nfrozen: reusing the bundle built on {base} from sources {digest}")
        return FrozenBuild(exe, base, why)
    dist = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    try:
        result = build_mod.build(dist, tarball=False, base=base)
    except build_mod.BuildError as exc:
        pytest.fail(f"building the executable failed: {exc}")
    print(
        f"\nfrozen: built on {base} in {time.monotonic() - started:.0f} s (old base "
        f"{result.oldbase_s} s, environment {result.venv_s} s, PyInstaller "
        f"{result.pyinstaller_s} s), {result.bundle_bytes / 2**20:.0f} MiB"
    )
    BUNDLES.mkdir(parents=True, exist_ok=True)
    partial = BUNDLES / f"{digest}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(dist / "kvpilot", partial / "kvpilot", symlinks=True)
    (partial / ".complete").write_text(f"{result.source_hash} {base}\n")
    shutil.rmtree(cached, ignore_errors=True)
    partial.rename(cached)
    _prune(keep=cached)
    return FrozenBuild(exe, base, why)


@pytest.fixture(scope="session")
def frozen_exe(frozen_build: FrozenBuild) -> Path:
    """The built executable (the launcher script in front of the bootloader)."""
    return frozen_build.exe


@pytest.fixture(scope="session")
def old_base_build(frozen_build: FrozenBuild) -> FrozenBuild:
    """The bundle, only when it was built in the Debian 11 root (else the test skips)."""
    if frozen_build.base != "debian11":
        pytest.skip(f"the bundle was built on this machine's base: the old base needs "
                    f"{frozen_build.why_host}")
    return frozen_build
