"""Build the kvpilot executable with PyInstaller.

    python3 packaging/build.py            # dist/kvpilot/ (folder) and its .tar.xz
    python3 packaging/build.py --onefile  # dist/kvpilot, one self-extracting file
    python3 packaging/build.py --fresh    # new build environment, PyInstaller cache cleared
    python3 packaging/build.py --base host  # on this machine's own libraries (quick, local only)

The release is built on the old base (``--base debian11``, the default): a Debian 11 root made
by ``packaging/oldbase.py`` (debootstrap, cached outside the checkout) with its own CPython, so
that every library in the bundle needs glibc 2.31 at most. This script then runs itself inside
that root (chroot, as root) with ``--base host``; its build environment and PyInstaller cache are
kept next to the root. ``--base host`` builds with this machine's Python and libraries: the
result only runs on systems as new as this one.

kvpilot is installed *not* editable, from a clean copy of the sources, into a build environment
of its own (``.cache/packaging/venv-<hash>``, reused while pyproject.toml and the Python version
stay the same), so that the ``kvpilot.core`` / ``kvpilot.gui`` / ``kvpilot.resources`` namespace
resolves to real files PyInstaller can follow. Then ``packaging/kvpilot.spec`` runs in that
environment.

The default is a folder (``onedir``) plus a tarball of it: a one-file executable unpacks its
~100 MB of Qt and numpy into a temporary directory on every start, which costs seconds per
``kvpilot --version``; the folder starts as fast as the installed app. ``--onefile`` is there for
those who want a single file anyway.

Exit status: 0 built, 1 the build failed (the failing step's output is shown).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (pip install tomli)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "kvpilot.spec"
#: what goes into the installed package (copied into a clean staging tree before pip install)
SOURCE_DIRS = ("core", "gui", "resources")
SOURCE_FILES = ("pyproject.toml", "README.md")
#: packaging files whose change changes the bundle (the smoke test and icon script do not)
PACKAGING_FILES = (
    "packaging/kvpilot.spec",
    "packaging/kvpilot_main.py",
    "packaging/rthook_child_env.py",
    "packaging/build.py",
    "packaging/oldbase.py",
    "packaging/launcher.sh",
    "packaging/rthook_launcher.py",
)
LAUNCHER = ROOT / "packaging" / "launcher.sh"
#: the bootloader's name in the bundle; ``kvpilot`` is the launcher script in front of it
REAL_EXE = "kvpilot.bin"
BASES = ("debian11", "host")
DEFAULT_CACHE = ROOT / ".cache" / "packaging"
DEFAULT_DIST = ROOT / "dist"
NAME = "kvpilot"


class BuildError(Exception):
    """A build step failed; the message names the step and carries its output's tail."""


@dataclass(frozen=True)
class BuildResult:
    """What a build produced. Sizes are bytes, durations seconds."""

    executable: str
    bundle_dir: str | None  # the onedir folder; None for --onefile
    tarball: str | None
    version: str
    source_hash: str
    onefile: bool
    bundle_bytes: int
    tarball_bytes: int | None
    venv_s: float
    pyinstaller_s: float
    total_s: float
    base: str = "host"
    sha256: str | None = None  # the tarball's, also written to ``<tarball>.sha256``
    oldbase_s: float = 0.0  # making (or checking) the Debian 11 root


# ------------------------------------------------------------------------------------- hashing
def _walk(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
    return sorted(files)


def source_hash(root: Path = ROOT, base: str = "host") -> str:
    """A short hash of everything that goes into the bundle (sources, resources, spec, Python,
    and the base: this machine's Python or the Debian 11 root's recipe).

    Two trees with the same hash give the same executable, so a built bundle can be reused.
    """
    digest = hashlib.sha256()
    if base == "host":
        digest.update(f"{sys.version_info[:3]}|{platform.machine()}".encode())
    else:
        digest.update(f"{base}|{_oldbase().recipe_hash()}|{platform.machine()}".encode())
    paths = [root / d for d in SOURCE_DIRS] + [root / f for f in (*SOURCE_FILES, *PACKAGING_FILES)]
    for path in _walk(paths):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


#: tools the bundle carries besides kvpilot's own dependencies (kvpilot.spec bundles uv's binary)
BUNDLED_REQUIREMENTS = ("uv>=0.8",)


def _env_hash(root: Path, python: str) -> str:
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes())
    digest.update("|".join(BUNDLED_REQUIREMENTS).encode())
    digest.update(_run([python, "-c", "import sys; print(sys.version)"], "python").encode())
    return digest.hexdigest()[:12]


def project_version(root: Path = ROOT) -> str:
    """The version in pyproject.toml (what ``kvpilot --version`` of the bundle must print)."""
    with open(root / "pyproject.toml", "rb") as fh:
        return str(tomllib.load(fh)["project"]["version"])


def _oldbase() -> ModuleType:
    """packaging/oldbase.py, loaded by path (this script runs without the repository on
    sys.path)."""
    import importlib.util

    name = "kvpilot_packaging_oldbase"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "packaging" / "oldbase.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sha256_file(path: Path) -> str:
    """The SHA-256 of ``path`` (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksum(tarball: Path) -> str:
    """Write ``<tarball>.sha256`` in ``sha256sum`` format (``sha256sum -c`` checks it);
    returns the hash."""
    value = sha256_file(tarball)
    tarball.with_name(tarball.name + ".sha256").write_text(f"{value}  {tarball.name}\n")
    return value


def install_launcher(bundle_dir: Path) -> Path:
    """Put the launcher script in front of the bootloader: ``kvpilot`` becomes
    packaging/launcher.sh (glibc floor filled in) and the bootloader ``kvpilot.bin``.
    Returns the launcher's path."""
    oldbase = _oldbase()
    exe = bundle_dir / NAME
    real = bundle_dir / REAL_EXE
    if exe.is_file() and _is_elf(exe):
        exe.replace(real)
    floor = ".".join(map(str, oldbase.GLIBC_FLOOR))
    text = (
        LAUNCHER.read_text()
        .replace("@FLOOR@", floor)
        .replace("@DISTRIBUTIONS@", oldbase.FLOOR_DISTRIBUTIONS)
    )
    exe.write_text(text)
    exe.chmod(0o755)
    return exe


# ------------------------------------------------------------------------------------- steps
@contextlib.contextmanager
def build_lock(cache: Path) -> Iterator[None]:
    """Hold ``cache/build.lock``: builds sharing a cache (environment, PyInstaller work folder)
    run one after the other."""
    with _oldbase().hold_lock(cache / "build.lock"):
        yield


def _run(
    cmd: Sequence[str],
    step: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    verbose: bool = False,
) -> str:
    """Run ``cmd``; returns its output. Raises BuildError with the output's tail on failure."""
    if verbose:
        print(f"build: $ {' '.join(cmd)}", flush=True)
    proc = subprocess.run(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if verbose and proc.stdout:
        print(proc.stdout, end="", flush=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-40:])
        raise BuildError(f"{step} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def stage_sources(root: Path, staging: Path) -> Path:
    """Copy what the wheel is built from into ``staging`` (no caches, no stale build/ trees)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for d in SOURCE_DIRS:
        shutil.copytree(root / d, staging / d, ignore=ignore)
    for f in SOURCE_FILES:
        if (root / f).exists():
            shutil.copy2(root / f, staging / f)
    return staging


def ensure_build_env(root: Path, cache: Path, python: str, fresh: bool, verbose: bool) -> Path:
    """The build environment with kvpilot's dependencies and PyInstaller; returns its python.

    Reused while pyproject.toml and the interpreter stay the same (``venv-<hash>/.complete``).
    """
    venv = cache / f"venv-{_env_hash(root, python)}"
    vpy = venv / "bin" / "python"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if (venv / ".complete").exists() and vpy.exists():
        return vpy
    for stale in cache.glob("venv-*"):  # environments of older pyproject.toml versions
        shutil.rmtree(stale, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    _run([python, "-m", "venv", str(venv)], "creating the build environment", verbose=verbose)
    pip = [str(vpy), "-m", "pip", "--disable-pip-version-check", "-q"]
    _run([*pip, "install", "--upgrade", "pip"], "upgrading pip", verbose=verbose)
    with open(root / "pyproject.toml", "rb") as fh:
        project = tomllib.load(fh)["project"]
    requirements = (
        list(project["dependencies"])
        + list(project["optional-dependencies"]["package"])
        + _build_requires(root)
        + list(BUNDLED_REQUIREMENTS)
    )
    _run(
        [*pip, "install", *requirements], "installing dependencies and PyInstaller", verbose=verbose
    )
    (venv / ".complete").write_text(json.dumps(requirements))
    return vpy


def install_kvpilot(root: Path, vpy: Path, verbose: bool) -> None:
    """Install kvpilot itself, not editable, from a clean copy of the sources."""
    with tempfile.TemporaryDirectory(prefix="kvpilot-stage-") as tmp:
        staging = stage_sources(root, Path(tmp))
        _run(
            [
                str(vpy),
                "-m",
                "pip",
                "--disable-pip-version-check",
                "-q",
                "install",
                "--no-deps",
                "--force-reinstall",
                "--no-build-isolation",
                str(staging),
            ],
            "installing kvpilot (not editable)",
            verbose=verbose,
        )


def _build_requires(root: Path) -> list[str]:
    """pyproject's build-system requirements: installed once so kvpilot builds offline."""
    with open(root / "pyproject.toml", "rb") as fh:
        return list(tomllib.load(fh)["build-system"]["requires"])


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _is_elf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def strip_debug(bundle_dir: Path, verbose: bool = False) -> int:
    """Drop debug sections from the bundle's ELF files; returns the bytes saved.

    PyInstaller's own ``strip`` option is all-or-nothing and breaks libraries that auditwheel
    rewrote with patchelf (numpy's OpenBLAS: "ELF load command address/offset not page-aligned"),
    so the vendored ``*.libs`` folders are left alone here. ``--strip-debug`` keeps symbol tables.
    """
    strip = shutil.which("strip")
    if strip is None:
        return 0
    targets = [
        p
        for p in sorted(bundle_dir.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and not any(part.endswith(".libs") for part in p.relative_to(bundle_dir).parts)
        and _is_elf(p)
    ]
    before = sum(p.stat().st_size for p in targets)
    for i in range(0, len(targets), 200):
        _run([strip, "--strip-debug", *map(str, targets[i : i + 200])], "strip", verbose=False)
    saved = before - sum(p.stat().st_size for p in targets)
    if verbose:
        print(f"build: strip --strip-debug on {len(targets)} files saved {saved / 2**20:.1f} MiB")
    return saved


#: window-system plugins whose unresolved libraries are worth a warning after a build
PLATFORM_PLUGINS = ("libqxcb.so", "libqwayland.so")


def unresolved_platform_libraries(internal: Path) -> dict[str, list[str]]:
    """Libraries the X11/Wayland platform plugins need that neither the bundle nor this machine
    has (``ldd``); a user's desktop must provide them. Empty when everything resolves."""
    ldd = shutil.which("ldd")
    plugins = internal / "PySide6" / "Qt" / "plugins" / "platforms"
    if ldd is None or not plugins.is_dir():
        return {}
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(internal), str(internal / "PySide6/Qt/lib")])
    missing: dict[str, list[str]] = {}
    for name in PLATFORM_PLUGINS:
        if not (plugins / name).is_file():
            continue
        out = subprocess.run(
            [ldd, str(plugins / name)], capture_output=True, text=True, env=env, check=False
        ).stdout
        libs = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
        if libs:
            missing[name] = libs
    return missing


#: the release archive's format: xz -9 makes the bundle's tarball 29 % smaller than gzip -6
#: (benchmarks/packaging_footprint.py prints both), at about 2 min of one core per build
TARBALL_SUFFIX = ".tar.xz"
XZ_PRESET = 9


def make_tarball(bundle_dir: Path, target: Path) -> Path:
    """``bundle_dir`` as a tarball whose single top folder is the bundle's name; compressed
    with xz (preset 9) when ``target`` ends in ``.tar.xz``, else with gzip (level 6)."""
    partial = target.with_name(target.name + ".partial")
    options: dict[str, Any] = (
        {"mode": "w:xz", "preset": XZ_PRESET}
        if target.name.endswith(".tar.xz")
        else {"mode": "w:gz", "compresslevel": 6}
    )
    with tarfile.open(partial, **options) as tar:
        tar.add(bundle_dir, arcname=bundle_dir.name)
    partial.replace(target)
    return target


def build(
    dist: Path = DEFAULT_DIST,
    cache: Path = DEFAULT_CACHE,
    *,
    onefile: bool = False,
    fresh: bool = False,
    tarball: bool = True,
    python: str = sys.executable,
    root: Path = ROOT,
    verbose: bool = False,
    base: str = "host",
) -> BuildResult:
    """Build the executable into ``dist``; returns what was built.

    ``base`` is ``host`` (this machine's Python and libraries) or ``debian11`` (in the Debian 11
    root of packaging/oldbase.py; ``cache`` and ``python`` are then the root's own).

    Raises:
        BuildError: a step (old base, environment, install, PyInstaller) failed.
    """
    if base == "debian11":
        return _build_in_oldbase(dist, onefile, fresh, tarball, root, verbose)
    if base != "host":
        raise BuildError(f"unknown base {base!r}; use one of {', '.join(BASES)}")
    with build_lock(cache):
        return _build_locked(dist, cache, onefile, fresh, tarball, python, root, verbose)


#: where things are seen inside the Debian 11 root during a build
_IN_ROOT_SRC = "/kvpilot-src"
_IN_ROOT_DIST = "/kvpilot-dist"
_IN_ROOT_CACHE = "/var/cache/kvpilot-build"
#: pip settings passed into the root (its own pip has no configuration file)
_PIP_ENV = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_DEFAULT_TIMEOUT", "PIP_TRUSTED_HOST")


def _build_in_oldbase(
    dist: Path, onefile: bool, fresh: bool, tarball: bool, root: Path, verbose: bool
) -> BuildResult:
    """Make (or reuse) the Debian 11 root, then run this script inside it with ``--base host``.
    """
    oldbase = _oldbase()
    started = time.monotonic()
    try:
        made = oldbase.ensure(verbose=verbose)
    except oldbase.OldBaseError as exc:
        raise BuildError(f"the Debian 11 build root: {exc}") from exc
    oldbase_s = time.monotonic() - started
    if not made.reused:
        print(
            f"build: Debian 11 root made in {oldbase_s:.0f} s (debootstrap "
            f"{made.debootstrap_s:.0f} s, Python {made.python_build_s:.0f} s)",
            flush=True,
        )
    build_cache = oldbase.cache_dir() / "build-cache"
    build_cache.mkdir(parents=True, exist_ok=True)
    dist.mkdir(parents=True, exist_ok=True)
    argv = [
        made.python, f"{_IN_ROOT_SRC}/packaging/build.py", "--base", "host",
        "--dist", _IN_ROOT_DIST, "--cache", _IN_ROOT_CACHE,
    ]  # fmt: skip
    argv += ["--onefile"] if onefile else []
    argv += ["--fresh"] if fresh else []
    argv += [] if tarball else ["--no-tarball"]
    argv += ["--verbose"] if verbose else []
    env = {k: os.environ[k] for k in _PIP_ENV if k in os.environ}
    if "KVPILOT_PYI_DEBUG" in os.environ:
        env["KVPILOT_PYI_DEBUG"] = os.environ["KVPILOT_PYI_DEBUG"]
    print("build: building in the Debian 11 root", flush=True)
    # the build inside takes the build cache's lock itself (build_lock)
    done = oldbase.run_in_root(
        made.root,
        " ".join(argv),
        binds={_IN_ROOT_SRC: root, _IN_ROOT_DIST: dist, _IN_ROOT_CACHE: build_cache},
        read_only=(_IN_ROOT_SRC,),
        env=env,
        stream=lambda line: print(f"  {line}", flush=True),
    )
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-40:])
        raise BuildError(
            f"the build in the Debian 11 root failed (exit {done.returncode}):\n{tail}"
        )
    try:
        inner = json.loads((dist / f"{NAME}-build.json").read_text())
    except (OSError, ValueError) as exc:
        raise BuildError(
            f"the build in the Debian 11 root left no {NAME}-build.json: {exc}"
        ) from exc
    for key in ("executable", "bundle_dir", "tarball"):
        if inner.get(key):
            inner[key] = str(dist / Path(inner[key]).relative_to(_IN_ROOT_DIST))
    inner.update(
        base="debian11",
        source_hash=source_hash(root, "debian11"),
        oldbase_s=round(oldbase_s, 1),
        total_s=round(time.monotonic() - started, 1),
    )
    result = BuildResult(**inner)
    (dist / f"{NAME}-build.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result


def _build_locked(
    dist: Path,
    cache: Path,
    onefile: bool,
    fresh: bool,
    tarball: bool,
    python: str,
    root: Path,
    verbose: bool,
) -> BuildResult:
    started = time.monotonic()
    digest = source_hash(root)
    vpy = ensure_build_env(root, cache, python, fresh, verbose)
    install_kvpilot(root, vpy, verbose)
    venv_s = time.monotonic() - started

    work = cache / "pyinstaller-work"
    dist.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["KVPILOT_ONEFILE"] = "1" if onefile else "0"
    env.pop("PYTHONPATH", None)  # nothing may shadow the installed kvpilot
    env["PYINSTALLER_CONFIG_DIR"] = str(cache / "pyinstaller-config")
    # the Python modules stored, not zlib-compressed, in the executable: the release tarball's
    # xz compresses them much better than zlib did (5 MB less archive), and nothing is
    # inflated at start-up
    env["PYINSTALLER_ZLIB_COMPRESSION_LEVEL"] = "0"
    cmd = [
        str(vpy),
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level",
        "WARN",
        "--distpath",
        str(dist),
        "--workpath",
        str(work),
        str(SPEC),
    ]
    if fresh:
        cmd.insert(3, "--clean")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvpilot-pyi-") as cwd:  # no source tree on sys.path
        _run(cmd, "PyInstaller", cwd=Path(cwd), env=env, verbose=verbose)
    pyinstaller_s = time.monotonic() - t0

    version = project_version(root)
    checksum: str | None = None
    if onefile:
        exe = dist / NAME
        bundle_dir = None
        tar_path = None
    else:
        bundle_dir = dist / NAME
        exe = install_launcher(bundle_dir)
        tar_path = None
        if os.environ.get("KVPILOT_PYI_DEBUG") != "1":
            strip_debug(bundle_dir / "_internal", verbose)
        if tarball:
            arch = platform.machine() or "unknown"
            for stale in dist.glob(f"{NAME}-*-linux-*.tar.gz"):  # the format before .tar.xz
                stale.unlink()
            tar_path = make_tarball(
                bundle_dir, dist / f"{NAME}-{version}-linux-{arch}{TARBALL_SUFFIX}"
            )
            checksum = write_checksum(tar_path)
    if not exe.is_file():
        raise BuildError(f"PyInstaller finished but {exe} is missing")
    result = BuildResult(
        executable=str(exe),
        bundle_dir=None if bundle_dir is None else str(bundle_dir),
        tarball=None if tar_path is None else str(tar_path),
        version=version,
        source_hash=digest,
        onefile=onefile,
        bundle_bytes=_tree_bytes(exe if onefile else exe.parent),
        tarball_bytes=None if tar_path is None else tar_path.stat().st_size,
        venv_s=round(venv_s, 1),
        pyinstaller_s=round(pyinstaller_s, 1),
        total_s=round(time.monotonic() - started, 1),
        sha256=checksum,
    )
    (dist / f"{NAME}-build.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    parser = argparse.ArgumentParser(description="Build the kvpilot executable (PyInstaller).")
    parser.add_argument("--dist", type=Path, default=DEFAULT_DIST, help="output folder (dist/)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="build environment and PyInstaller work folder (.cache/packaging/)",
    )
    parser.add_argument("--onefile", action="store_true", help="one self-extracting file")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="recreate the build environment and clear PyInstaller's cache",
    )
    parser.add_argument("--no-tarball", action="store_true", help="skip the .tar.xz")
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter for the build environment (this one)"
    )
    parser.add_argument(
        "--base",
        choices=BASES,
        default="debian11",
        help="debian11 (the release: a Debian 11 root, glibc 2.31) or host (this machine)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show every step's output")
    args = parser.parse_args(argv)
    try:
        result = build(
            args.dist.resolve(),
            args.cache.resolve(),
            onefile=args.onefile,
            fresh=args.fresh,
            tarball=not args.no_tarball,
            python=args.python,
            verbose=args.verbose,
            base=args.base,
        )
    except BuildError as exc:
        print(f"build: {exc}", file=sys.stderr)
        return 1
    mib = 1024**2
    if result.bundle_dir is not None:
        internal = Path(result.bundle_dir) / "_internal"
        for plugin, libs in unresolved_platform_libraries(internal).items():
            print(
                f"build: warning: {plugin} needs {', '.join(libs)}, missing on this machine and "
                "so not bundled; users need them installed (Debian/Ubuntu: apt install "
                "libxcb-icccm4 libxcb-keysyms1 ...), or build where they are installed"
            )
    print(f"build: {result.executable} (kvpilot {result.version}, sources {result.source_hash})")
    print(
        f"build: bundle {result.bundle_bytes / mib:.1f} MiB"
        + (
            ""
            if result.tarball_bytes is None
            else f", tarball {result.tarball_bytes / mib:.1f} MiB at {result.tarball}"
            f" (SHA-256 {result.sha256}, also in {result.tarball}.sha256)"
        )
    )
    print(
        f"build: base {result.base}: old base {result.oldbase_s:.1f} s, environment "
        f"{result.venv_s:.1f} s, PyInstaller {result.pyinstaller_s:.1f} s, total "
        f"{result.total_s:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
