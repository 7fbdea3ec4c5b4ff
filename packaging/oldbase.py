"""The old base the release is built on: a Debian 11 (bullseye, glibc 2.31) root made with
``debootstrap``, and a CPython 3.11 compiled inside it.

    python3 packaging/oldbase.py          # make (or check) the root and its Python; print where
    python3 packaging/oldbase.py --fresh  # throw the cached root away and make it again

Everything a library in the bundle links against then comes from Debian 11, so the bundle needs
glibc 2.31 at most (the floor: Ubuntu 20.04+, Debian 11+, RHEL/Rocky 9+, Fedora 33+). The root
is cached outside the checkout, in ``${XDG_CACHE_HOME:-~/.cache}/kvpilot-packaging/``
(``KVPILOT_OLDBASE_CACHE`` overrides it), and reused while its recipe (suite, packages, Python
version and configure flags) stays the same; the downloaded ``.deb`` files and the Python source
are kept there too, so a rebuild does not download them again.

Needs root (``debootstrap`` and ``chroot``), ``debootstrap`` itself (Debian/Ubuntu: ``apt install
debootstrap``) and ``unshare`` (util-linux). Programs run in the root through :func:`run_in_root`,
in a private mount namespace with its own ``/proc``: the bind mounts vanish with the process, so
an interrupted build leaves nothing mounted.

A root is complete when its marker (``.kvpilot-oldbase.json``) names the current recipe and its
Python imports the modules the build needs; anything else (half-made, an older recipe, a deleted
file) is removed and made again.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the glibc the bundle may need at most, and the GCC runtime of the same base (Debian 11's
#: libstdc++6 is GCC 10's: GLIBCXX_3.4.28, CXXABI_1.3.12)
GLIBC_FLOOR = (2, 31)
GLIBCXX_FLOOR = (3, 4, 28)
FLOOR_DISTRIBUTIONS = "Ubuntu 20.04+, Debian 11+, RHEL/Rocky 9+, Fedora 33+, WSL2 with WSLg"

SUITE = "bullseye"
MIRROR = os.environ.get("KVPILOT_DEBIAN_MIRROR", "http://deb.debian.org/debian")
#: build tools, the headers CPython's modules need, and the desktop libraries Qt's offscreen and
#: xcb plugins load (present on every desktop, so not bundled; here for the smoke test)
PACKAGES = (
    "build-essential", "pkg-config", "ca-certificates",
    "libssl-dev", "zlib1g-dev", "libffi-dev", "libbz2-dev", "liblzma-dev", "libsqlite3-dev",
    "uuid-dev",
    "libfontconfig1", "libfreetype6", "libglib2.0-0", "libdbus-1-3",
    "libgl1", "libegl1", "libopengl0", "libxkbcommon0", "libxkbcommon-x11-0",
    "libx11-xcb1", "libxcb-icccm4", "libxcb-image0", "libxcb-keysyms1", "libxcb-randr0",
    "libxcb-render-util0", "libxcb-shape0", "libxcb-xfixes0", "libxcb-xinerama0", "libxcb-xkb1",
    "libxcb-cursor0", "libxrender1", "libxi6", "libsm6", "libice6",
    "libwayland-client0", "libwayland-cursor0", "libwayland-egl1",
)  # fmt: skip
#: CPython from Debian's own source package (the upstream tarball, as Debian ships it)
PYTHON_VERSION = "3.11.2"
PYTHON_SOURCE = f"python3.11_{PYTHON_VERSION}.orig.tar.gz"
PYTHON_SOURCE_URL = f"{MIRROR}/pool/main/p/python3.11/{PYTHON_SOURCE}"
PYTHON_SOURCE_SHA256 = "2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849"
#: where the Python lives inside the root; ``$ORIGIN`` makes the tree relocatable (it is also
#: what the uv mirror test serves as a managed Python)
PYTHON_PREFIX = "/opt/kvpilot-python"
CONFIGURE = (
    f"--prefix={PYTHON_PREFIX}",
    "--enable-shared",
    "--without-ensurepip",
    "LDFLAGS=-Wl,-rpath,\\$$ORIGIN/../lib",  # \$$: through make and the shell
)
#: modules the build (pip, PyInstaller, kvpilot) and a runtime venv need from that Python
PYTHON_CHECK = "import ssl, sqlite3, lzma, bz2, zlib, ctypes, uuid, venv, hashlib; print('ok')"
MARKER = ".kvpilot-oldbase.json"
LOCK = "oldbase.lock"

Progress = Callable[[str], None]


class OldBaseError(Exception):
    """The root could not be made or used; the message names the step and what to do."""


@dataclass(frozen=True)
class OldBase:
    """A complete root. ``python`` is the interpreter's path inside the root."""

    root: Path
    python: str
    recipe: str
    reused: bool
    debootstrap_s: float
    python_build_s: float


def _say(text: str) -> None:
    print(f"oldbase: {text}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """Where roots, ``.deb`` files and sources are kept (outside any checkout)."""
    explicit = os.environ.get("KVPILOT_OLDBASE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kvpilot-packaging"


def recipe() -> dict[str, object]:
    """What the root is made from; its hash names the root's folder."""
    return {
        "suite": SUITE,
        "packages": list(PACKAGES),
        "python": PYTHON_VERSION,
        "python_sha256": PYTHON_SOURCE_SHA256,
        "configure": list(CONFIGURE),
        "prefix": PYTHON_PREFIX,
    }


def recipe_hash() -> str:
    """A short hash of :func:`recipe`."""
    return hashlib.sha256(json.dumps(recipe(), sort_keys=True).encode()).hexdigest()[:12]


def missing_tools() -> list[str]:
    """What this machine lacks to make or enter a root, one phrase each (empty: all there)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root (debootstrap and chroot need it)")
    for tool, package in (("debootstrap", "debootstrap"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            problems.append(f"{tool} (apt install {package})")
    return problems


@contextlib.contextmanager
def hold_lock(path: Path, say: Progress | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (made with its folder): builds sharing a cache run one after
    the other; ``say`` is told when another build holds it and this one waits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if say is not None:
                say(f"waiting for another build holding {path}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def run_in_root(
    root: Path,
    command: str,
    *,
    binds: Mapping[str, Path] | None = None,
    read_only: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stream: Progress | None = None,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run the shell ``command`` in ``root`` (chroot) in a private mount and pid namespace.

    ``binds`` maps a path inside the root to a host folder mounted there (``read_only`` lists
    those mounted read-only); ``/etc/resolv.conf`` is the host's, for downloads. The environment
    is ``env`` over a minimal one (PATH, HOME=/root, LANG=C.UTF-8). ``stream`` receives each
    output line as it comes; the result carries the whole output in ``stdout`` (stderr merged).
    Does not raise on a non-zero exit.
    """
    mounts = []
    for inside, host in (binds or {}).items():
        target = root / inside.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        mounts.append(f"mount --bind {shlex.quote(str(host))} {shlex.quote(str(target))}")
        if inside in read_only:
            mounts.append(f"mount -o remount,bind,ro {shlex.quote(str(target))}")
    resolv = Path("/etc/resolv.conf")
    if resolv.is_file():
        (root / "etc" / "resolv.conf").write_bytes(resolv.read_bytes())
    clean = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
    }
    clean.update(_host_certificates(root))
    clean.update(env or {})
    inner = " ".join(
        ["exec", "chroot", shlex.quote(str(root)), "/usr/bin/env", "-i"]
        + [shlex.quote(f"{k}={v}") for k, v in clean.items()]
        + ["/bin/sh", "-c", shlex.quote(command)]
    )
    script = " && ".join(
        [*mounts, f"mount -t proc proc {shlex.quote(str(root / 'proc'))}", inner]
    )
    argv = ["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", script]
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    rc, lines = _streamed(argv, stream or (lambda _line: None), deadline)
    return subprocess.CompletedProcess(argv, rc, "".join(lines), "")


def _streamed(
    argv: Sequence[str], on_line: Progress, deadline: float | None = None
) -> tuple[int, list[str]]:
    """Run ``argv`` (stderr into stdout), handing each output line to ``on_line`` as it comes
    (without its line break); killed once ``deadline`` (``time.monotonic``) has passed. Returns
    the exit status and the lines as read."""
    lines: list[str] = []
    with subprocess.Popen(
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            on_line(line.rstrip("\n"))
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                break
        rc = proc.wait()
    return rc, lines


#: where the host's certificate bundle is put in the root
_HOST_CA = "/etc/ssl/certs/kvpilot-host-ca.crt"


def _host_certificates(root: Path) -> dict[str, str]:
    """The host's CA bundle, copied into the root, as the environment that points pip and
    Python's ssl at it: downloads from the root then trust what the host trusts (a site's own
    certificate authority included), not only Debian 11's list."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        "/etc/ssl/certs/ca-certificates.crt",
    ):
        if candidate and Path(candidate).is_file():
            target = root / _HOST_CA.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(Path(candidate).read_bytes())
            return {"PIP_CERT": _HOST_CA, "SSL_CERT_FILE": _HOST_CA}
    return {}


def _check(root: Path, command: str, step: str, say: Progress, verbose: bool) -> str:
    """Run ``command`` in the root; raise OldBaseError with the output's tail on failure."""
    done = run_in_root(root, command, stream=say if verbose else None)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise OldBaseError(f"{step} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _fetch_source(cache: Path, say: Progress) -> Path:
    """The CPython source tarball, downloaded once and checked against its SHA-256."""
    sources = cache / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    path = sources / PYTHON_SOURCE
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == PYTHON_SOURCE_SHA256:
        return path
    say(f"downloading {PYTHON_SOURCE_URL}")
    partial = path.with_name(path.name + ".partial")
    try:
        with urllib.request.urlopen(PYTHON_SOURCE_URL, timeout=60) as resp, open(partial, "wb") as out:  # noqa: E501
            shutil.copyfileobj(resp, out)
    except OSError as exc:
        raise OldBaseError(
            f"downloading the Python source from {PYTHON_SOURCE_URL} failed: {exc}; set "
            "KVPILOT_DEBIAN_MIRROR to a reachable Debian mirror"
        ) from exc
    digest = hashlib.sha256(partial.read_bytes()).hexdigest()
    if digest != PYTHON_SOURCE_SHA256:
        partial.unlink()
        raise OldBaseError(
            f"{PYTHON_SOURCE_URL} has SHA-256 {digest}, expected {PYTHON_SOURCE_SHA256}"
        )
    partial.replace(path)
    return path


def _remove_root(path: Path) -> None:
    """Delete a root (nothing is mounted in it: mounts live in the namespaces of run_in_root)."""
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
    if path.exists():
        raise OldBaseError(f"could not remove {path}; remove it by hand and run again")


def _healthy(root: Path) -> bool:
    """True when ``root`` is complete for the current recipe and its Python works."""
    marker = root / MARKER
    try:
        if json.loads(marker.read_text()).get("recipe") != recipe():
            return False
    except (OSError, ValueError, AttributeError):
        return False
    python = root / PYTHON_PREFIX.lstrip("/") / "bin" / "python3.11"
    if not python.is_file() or not (root / "usr" / "bin" / "gcc").exists():
        return False
    done = run_in_root(root, f"{PYTHON_PREFIX}/bin/python3.11 -c {shlex.quote(PYTHON_CHECK)}")
    return done.returncode == 0 and done.stdout.strip().endswith("ok")


def _debootstrap(target: Path, cache: Path, say: Progress, verbose: bool) -> None:
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    argv = [
        "debootstrap", "--variant=minbase", f"--cache-dir={debs}",
        f"--include={','.join(PACKAGES)}", SUITE, str(target), MIRROR,
    ]  # fmt: skip
    say(f"debootstrap {SUITE} into {target} (.deb files cached in {debs})")
    last = 0.0

    def shown(line: str) -> None:
        nonlocal last
        text = line.rstrip()
        # debootstrap's stages ("I: Retrieving", "I: Unpacking", "I: Configuring") every 10 s
        if verbose or (text.startswith("I: ") and time.monotonic() - last > 10):
            say(text)
            last = time.monotonic()

    rc, lines = _streamed(argv, shown)
    if rc != 0:
        tail = "".join(lines[-30:])
        raise OldBaseError(
            f"debootstrap {SUITE} failed (exit {rc}); is {MIRROR} reachable "
            f"(KVPILOT_DEBIAN_MIRROR)?\n{tail}"
        )


def _build_python(target: Path, cache: Path, say: Progress, verbose: bool) -> None:
    source = _fetch_source(cache, say)
    src = target / "usr" / "src"
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source) as tar:
        tar.extractall(src, filter="tar")
    jobs = max(1, os.cpu_count() or 1)
    configure = " ".join(shlex.quote(a) for a in CONFIGURE)
    steps = (
        ("configure", f"./configure -q {configure}"),
        (f"make -j{jobs}", f"make -s -j{jobs}"),
        ("make install", "make -s install"),
    )
    for name, command in steps:
        say(f"Python {PYTHON_VERSION}: {name} (in the root)")
        _check(
            target,
            f"cd /usr/src/Python-{PYTHON_VERSION} && {command}",
            f"building Python {PYTHON_VERSION}: {name}",
            say,
            verbose,
        )
    shutil.rmtree(src / f"Python-{PYTHON_VERSION}")
    out = _check(
        target,
        f"{PYTHON_PREFIX}/bin/python3.11 -c {shlex.quote(PYTHON_CHECK)}",
        "checking the built Python",
        say,
        verbose,
    )
    if not out.strip().endswith("ok"):
        raise OldBaseError(f"the built Python lacks a module it needs:\n{out[-2000:]}")


def ensure(
    *, fresh: bool = False, verbose: bool = False, say: Progress = _say
) -> OldBase:
    """The complete root for the current recipe, made when missing, outdated or damaged.

    Holds ``<cache>/oldbase.lock`` while checking and making it. Raises OldBaseError when a
    tool is missing or a step fails (the half-made root is removed).
    """
    problems = missing_tools()
    if problems:
        raise OldBaseError(
            "making the Debian 11 build root needs " + "; ".join(problems)
            + "; or build on this machine's own base with --base host"
        )
    cache = cache_dir()
    digest = recipe_hash()
    root = cache / f"debian11-{digest}"
    python = f"{PYTHON_PREFIX}/bin/python3.11"
    with hold_lock(cache / LOCK, say):
        if fresh:
            _remove_root(root)
        if root.exists() and _healthy(root):
            return OldBase(root, python, digest, True, 0.0, 0.0)
        if root.exists():
            say(f"{root} is incomplete or damaged; making it again")
            _remove_root(root)
        partial = root.with_name(root.name + ".partial")
        _remove_root(partial)
        try:
            t0 = time.monotonic()
            _debootstrap(partial, cache, say, verbose)
            debootstrap_s = time.monotonic() - t0
            say(f"root made in {debootstrap_s:.0f} s; building Python {PYTHON_VERSION} in it")
            t1 = time.monotonic()
            _build_python(partial, cache, say, verbose)
            python_build_s = time.monotonic() - t1
            say(f"Python {PYTHON_VERSION} built in {python_build_s:.0f} s")
            (partial / MARKER).write_text(
                json.dumps(
                    {
                        "recipe": recipe(),
                        "debootstrap_s": round(debootstrap_s, 1),
                        "python_build_s": round(python_build_s, 1),
                    },
                    indent=2,
                )
                + "\n"
            )
        except BaseException:
            _remove_root(partial)
            raise
        partial.rename(root)
        for stale in cache.glob("debian11-*"):  # roots of older recipes
            if stale != root and not stale.name.endswith(".partial"):
                _remove_root(stale)
        return OldBase(root, python, digest, False, debootstrap_s, python_build_s)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    parser = argparse.ArgumentParser(description="Make the Debian 11 build root and its Python.")
    parser.add_argument("--fresh", action="store_true", help="remove the cached root first")
    parser.add_argument("-v", "--verbose", action="store_true", help="show every step's output")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        base = ensure(fresh=args.fresh, verbose=args.verbose)
    except OldBaseError as exc:
        print(f"oldbase: {exc}", file=sys.stderr)
        return 1
    how = "reused" if base.reused else (
        f"made: debootstrap {base.debootstrap_s:.0f} s, Python {base.python_build_s:.0f} s"
    )
    print(f"oldbase: {base.root} ({how}; {time.monotonic() - started:.0f} s in all)")
    print(f"oldbase: python {base.python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
