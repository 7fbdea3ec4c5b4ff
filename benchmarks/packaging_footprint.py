"""Size, cold start and idle memory of the frozen kvpilot, against a bare PySide6 + pyqtgraph
window frozen the same way (same build environment, PyInstaller, onedir, archived the same way).

    python3 packaging/build.py                      # dist/kvpilot/ and its tarball first
    .venv/bin/python benchmarks/packaging_footprint.py [--runs 3] [--idle-s 15] [--also DIR]
        [--app DIR] [--base debian11|host] [--times-only]

The bare app is frozen on the base the app was built on (``--base``; default: what
``dist/kvpilot-build.json`` says): in the Debian 11 root of packaging/oldbase.py with that
root's build environment, or with this machine's (``.cache/packaging/venv-*``). Both then run
here, on this machine.

Prints: the folder's size and its archive's in both formats, .tar.xz (xz -9, the release
format) and .tar.gz (gzip -6), made by packaging/build.py's make_tarball for both apps (goal:
release archive <= 60 MB); from runs of ``kvpilot gui --screenshot`` and of the bare app, taking
turns run by run, three times: start to the first shown window (the main window's first paint,
reported by the process through ``KVPILOT_SHOWN_MARK``; goal: within 1.3x the bare app's), the
CPU time the process had used by then (the same moment, waits for the disk or a busy core left
out), and start to the screenshot written (kvpilot waits for the GPU probe, the vLLM lookup and
the first plans, then 1 s for charts to settle; the bare app grabs at once); start to the ranked
plans on screen (the first paint of the planner's table with plans in it, reported through
``KVPILOT_RANKED_MARK``; goal: within 2x the bare app's ready time, its screenshot written; shown
against the bare app's first paint too); and the idle RSS of the whole process tree after
``--idle-s`` seconds (goal: <= 250 MB). Offscreen Qt; a recorded RTX 4090 stands in for NVML.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import psutil

ROOT = Path(__file__).resolve().parents[1]
BARE = '''
import os
import sys
import time
from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication, QMainWindow
import pyqtgraph as pg


class FirstPaint(QObject):
    seen = False

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Paint and watched.isWidgetType() and watched.window() is win:
            self.seen = True
        return False


app = QApplication(sys.argv)
win = QMainWindow()
plot = pg.PlotWidget()
plot.plot([0, 1, 2, 3], [0, 1, 4, 9])
win.setCentralWidget(plot)
win.resize(1360, 740)
watcher = FirstPaint()
app.installEventFilter(watcher)
win.show()
app.processEvents()
if watcher.seen and os.environ.get("KVPILOT_SHOWN_MARK"):
    with open(os.environ["KVPILOT_SHOWN_MARK"], "w") as fh:
        fh.write(f"{time.time():.6f} {time.process_time():.6f}\\n")
if len(sys.argv) > 1 and sys.argv[1] != "--idle":
    win.grab().save(sys.argv[1], "PNG")
    sys.exit(0)
sys.exit(app.exec())
'''


def _build_python() -> Path:
    venvs = sorted((ROOT / ".cache" / "packaging").glob("venv-*/bin/python"),
                   key=lambda p: p.stat().st_mtime)
    if not venvs:
        raise SystemExit("no build environment: run python3 packaging/build.py first")
    return venvs[-1]


def _folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _make_tarball() -> Callable[[Path, Path], Path]:
    """packaging/build.py's make_tarball (the release archive's own code)."""
    spec = importlib.util.spec_from_file_location("kvpilot_build", ROOT / "packaging" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module.make_tarball


def _archive_sizes(folder: Path, work: Path) -> dict[str, int]:
    make_tarball = _make_tarball()
    sizes = {}
    for suffix in (".tar.xz", ".tar.gz"):
        out = make_tarball(folder, work / f"{folder.name}{suffix}")
        sizes[suffix] = out.stat().st_size
        out.unlink()
    return sizes


def _load_packaging(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kvpilot_{name}",
                                                  ROOT / "packaging" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


#: how packaging/build.py runs PyInstaller (modules stored, the tarball's xz compresses them)
PYI_ENV = {"PYINSTALLER_ZLIB_COMPRESSION_LEVEL": "0"}


def _build_bare(work: Path, base: str) -> Path:
    script = work / "bare.py"
    script.write_text(BARE)
    if base == "debian11":
        oldbase = _load_packaging("oldbase")
        made = oldbase.ensure()
        cache = oldbase.cache_dir() / "build-cache"
        # complete environments (their bin/python links into the root, so not followed here)
        venvs = sorted(cache.glob("venv-*/.complete"), key=lambda p: p.stat().st_mtime)
        if not venvs:
            raise SystemExit("no build environment in the Debian 11 root: run "
                             "python3 packaging/build.py first")
        inside = f"/var/cache/kvpilot-build/{venvs[-1].parent.name}/bin/python"
        done = oldbase.run_in_root(
            made.root,
            f"cd /kvpilot-bench && {inside} -m PyInstaller --noconfirm --onedir --name bare "
            "--distpath dist --workpath build --specpath . bare.py",
            binds={"/kvpilot-bench": work, "/var/cache/kvpilot-build": cache}, env=PYI_ENV,
        )
        if done.returncode != 0:
            raise SystemExit(f"freezing the bare app in the Debian 11 root failed:\n"
                             f"{done.stdout[-3000:]}")
    else:
        subprocess.run(
            [str(_build_python()), "-m", "PyInstaller", "--noconfirm", "--onedir", "--name",
             "bare", "--distpath", str(work / "dist"), "--workpath", str(work / "build"),
             "--specpath", str(work), str(script)],
            check=True, capture_output=True, text=True, env=dict(os.environ, **PYI_ENV),
        )
    return work / "dist" / "bare"


def _built_base(app_dir: Path) -> str:
    """The base ``app_dir`` was built on, from the build's record beside it (host if none)."""
    record = app_dir.parent / "kvpilot-build.json"
    try:
        return str(json.loads(record.read_text()).get("base", "host"))
    except (OSError, ValueError):
        return "host"


def _one_start(
    argv: list[str], shot: Path, env: dict[str, str]
) -> tuple[float, float, float, float]:
    """(start to first shown window, start to screenshot written, CPU seconds the process had
    used when it was first shown, start to ranked plans on screen) of one run, in seconds; the
    last is NaN for the bare app, which plans nothing, and for builds older than its mark.

    "Shown" is the first paint of the main window, written by the process itself as a
    wall-clock time and its ``time.process_time()`` to ``$KVPILOT_SHOWN_MARK``
    (kvpilot.gui.app.FirstPaint; the bare app watches for the same paint event); "ranked" the
    first paint of the planner's table holding ranked plans, written the same way to
    ``$KVPILOT_RANKED_MARK``. The CPU
    time leaves out waiting (for the disk, for a core a neighbour holds), which the wall-clock
    times include.
    """
    mark = shot.with_suffix(".shown")
    ranked = shot.with_suffix(".ranked")
    for path in (shot, mark, ranked):
        path.unlink(missing_ok=True)
    wall0 = time.time()
    t0 = time.perf_counter()
    subprocess.run([*argv, str(shot)], check=True,
                   env=dict(env, KVPILOT_SHOWN_MARK=str(mark), KVPILOT_RANKED_MARK=str(ranked)),
                   capture_output=True, timeout=300)
    done = time.perf_counter() - t0
    if not shot.exists():
        raise SystemExit(f"{argv[0]} wrote no screenshot")
    if not mark.exists():
        raise SystemExit(f"{argv[0]} did not report its first shown window")
    fields = [float(field) for field in mark.read_text().split()]
    shown_cpu = fields[1] if len(fields) > 1 else math.nan  # builds older than the CPU mark
    ranked_s = float(ranked.read_text().split()[0]) - wall0 if ranked.exists() else math.nan
    return fields[0] - wall0, done, shown_cpu, ranked_s


def _start_times(
    apps: dict[str, tuple[list[str], Path]], runs: int, env: dict[str, str]
) -> dict[str, list[tuple[float, float, float, float]]]:
    """:func:`_one_start` ``runs`` times for each app, taking turns (app, bare, app, ...), so
    that both meet the same machine: a neighbour's load or a warmer page cache that comes
    and goes during the runs weighs on both alike."""
    times: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in apps}
    for _ in range(runs):
        for name, (argv, shot) in apps.items():
            times[name].append(_one_start(argv, shot, env))
    return times


def _idle_rss(argv: list[str], idle_s: float, env: dict[str, str]) -> int:
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(idle_s)
        p = psutil.Process(proc.pid)
        return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)])
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=15.0)
    ap.add_argument("--also", type=Path, metavar="DIR",
                    help="another frozen kvpilot folder (an older build's dist/kvpilot) whose "
                         "first shown window is timed in the same turns, for a before/after")
    ap.add_argument("--app", type=Path, default=ROOT / "dist" / "kvpilot",
                    help="the built kvpilot folder (dist/kvpilot)")
    ap.add_argument("--base", choices=("debian11", "host"),
                    help="freeze the bare app on this base (default: the app's own)")
    ap.add_argument("--times-only", action="store_true",
                    help="only the start times: no archives made (xz -9 of both folders takes "
                         "minutes) and no idle RSS")
    args = ap.parse_args()
    app_dir = args.app.resolve()
    if not (app_dir / "kvpilot").exists():
        raise SystemExit(f"{app_dir}/kvpilot is missing: run python3 packaging/build.py")
    base = args.base or _built_base(app_dir)
    print(f"app {app_dir} (built on {base}); the bare app is frozen on {base}")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", KVPILOT_FAKE_NVML="rtx4090-desktop")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env.update(KVPILOT_DATA_DIR=str(work / "data"), KVPILOT_CACHE_DIR=str(work / "cache"),
                   KVPILOT_CONFIG_DIR=str(work / "config"))
        bare_dir = _build_bare(work, base)
        sizes = {} if args.times_only else {
            "kvpilot": (_archive_sizes(app_dir, work), _folder_bytes(app_dir)),
            "bare": (_archive_sizes(bare_dir, work), _folder_bytes(bare_dir)),
        }
        apps = {"kvpilot": ([str(app_dir / "kvpilot"), "gui", "--screenshot"], work / "a.png"),
                "bare": ([str(bare_dir / "bare")], work / "b.png")}
        if args.also is not None:
            apps["also"] = ([str(args.also / "kvpilot"), "gui", "--screenshot"], work / "c.png")
        times = _start_times(apps, args.runs, env)
        app_t, bare_t = times["kvpilot"], times["bare"]
        if not args.times_only:
            app_rss = _idle_rss([str(app_dir / "kvpilot"), "gui"], args.idle_s, env)
            bare_rss = _idle_rss([str(bare_dir / "bare"), "--idle"], args.idle_s, env)
    mb = 1e6
    for name, (tars, dir_b) in sizes.items():
        print(f"{name:8s} tar.xz {tars['.tar.xz'] / mb:6.1f} MB   tar.gz "
              f"{tars['.tar.gz'] / mb:6.1f} MB   folder {dir_b / mb:6.1f} MB")
    if sizes:
        release = sizes["kvpilot"][0][".tar.xz"]
        print(f"release archive (.tar.xz) goal <= 60 MB: kvpilot {release / mb:.1f} MB "
              f"({'met' if release <= 60 * mb else 'not met'})")
    for i, what in ((0, "start to first shown window (first paint)"),
                    (2, "CPU time to first shown window (process_time at the first paint)"),
                    (1, "start to screenshot written (kvpilot: GPU probed, vLLM looked up, "
                        "plans shown, 1 s settle)")):
        a = statistics.median(t[i] for t in app_t)
        b = statistics.median(t[i] for t in bare_t)
        goal = " (goal <= 1.3x)" if i == 0 else ""
        print(f"{what}, median of {args.runs}: kvpilot {a:.2f} s, bare {b:.2f} s, ratio "
              f"{a / b:.2f}x{goal}; fastest {min(t[i] for t in app_t):.2f} s / "
              f"{min(t[i] for t in bare_t):.2f} s, first runs {app_t[0][i]:.2f} s / "
              f"{bare_t[0][i]:.2f} s")
    ranked = [t[3] for t in app_t]
    if all(math.isnan(r) for r in ranked):
        print("ranked plans on screen: this build does not mark them")
    else:
        a = statistics.median(ranked)
        ready = statistics.median(t[1] for t in bare_t)
        painted = statistics.median(t[0] for t in bare_t)
        print(f"start to ranked plans on screen (the planner's table painted with plans), median "
              f"of {args.runs}: kvpilot {a:.2f} s; {a / ready:.2f}x the bare app's ready time "
              f"(screenshot written, {ready:.2f} s; goal <= 2x), {a / painted:.2f}x its first "
              f"paint ({painted:.2f} s); fastest {min(ranked):.2f} s, first run {ranked[0]:.2f} s")
    if args.also is not None:
        also = statistics.median(t[0] for t in times["also"])
        bare = statistics.median(t[0] for t in bare_t)
        print(f"start to first shown window of {args.also}, median of {args.runs} in the same "
              f"turns: {also:.2f} s, ratio {also / bare:.2f}x")
        also_ranked = [t[3] for t in times["also"]]
        if not any(math.isnan(r) for r in also_ranked):
            ready = statistics.median(t[1] for t in bare_t)
            print(f"start to ranked plans on screen of {args.also}, same turns: "
                  f"{statistics.median(also_ranked):.2f} s, "
                  f"{statistics.median(also_ranked) / ready:.2f}x the bare app's ready time")
    if not args.times_only:
        print(f"idle RSS after {args.idle_s:.0f} s: kvpilot {app_rss / 2**20:.0f} MiB, bare "
              f"{bare_rss / 2**20:.0f} MiB (goal <= 250 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
