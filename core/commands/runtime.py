"""``kvpilot runtime list [--json] | install [VERSION] [--variant cuda|cpu] | remove VERSION |
default VERSION``: the vLLM runtimes kvpilot manages in its data directory.

``install`` without a version picks the newest build the detected hardware supports (NVIDIA
driver's CUDA version; the CPU build without an NVIDIA GPU), checks disk, Python and the index
first, prints progress in packages and bytes, and keeps the full log. Ctrl-C cancels: the
installer's process tree is stopped and the half-made folder removed. ``remove`` refuses a
runtime that a settings profile pins unless ``--force`` (which also unpins those profiles).

Exit status: 0 done, 1 the install failed or was cancelled, 2 a user error (one line says why).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from kvpilot.core.base.errors import RuntimeInstallCancelled, RuntimeInstallError, SettingsError
from kvpilot.core.base.units import size_text
from kvpilot.core.commands import Subparsers
from kvpilot.core.runtimes import store
from kvpilot.core.runtimes.progress import InstallProgress

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Settings


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``runtime`` on the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "runtime",
        help="install, list and remove the vLLM runtimes kvpilot manages",
        description=(
            "Managed vLLM runtimes live in kvpilot's data directory (KVPILOT_DATA_DIR moves it) "
            "under runtimes/<version>-<variant>/ and are found without any setting."
        ),
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the managed runtimes and the other vLLMs found")
    ls.add_argument("--json", action="store_true", help="print one JSON document")
    ins = sub.add_parser("install", help="install a vLLM runtime (default: best for this machine)")
    ins.add_argument("version", nargs="?", metavar="VERSION", help="vLLM version (e.g. 0.32.0)")
    ins.add_argument("--variant", choices=("cuda", "cpu"), help="build (default: from the GPU)")
    ins.add_argument("--installer", choices=("auto", "uv", "pip"), default="auto",
                     help="package installer (default: uv when available, else pip)")
    ins.add_argument("--index-url", metavar="URL", help="package index (default: the installer's)")
    ins.add_argument("--find-links", metavar="DIR", action="append", default=[],
                     help="also take wheels from this folder (repeatable)")
    ins.add_argument("--no-index", action="store_true", help="use only --find-links folders")
    ins.add_argument("--python", metavar="PATH", help="the Python interpreter for the venv")
    ins.add_argument("--default", dest="make_default", action="store_true",
                     help="make it the default even if another default exists")
    ins.add_argument("--dry-run", action="store_true",
                     help="only say what would be installed and run the checks")
    ins.add_argument("--json", action="store_true", help="print the result as JSON")
    ins.add_argument("--fake-nvml", metavar="SNAPSHOT", help=argparse.SUPPRESS)
    rm = sub.add_parser("remove", help="delete a managed runtime")
    rm.add_argument("version", metavar="VERSION", help="id (0.32.0-cpu) or version")
    rm.add_argument("--force", action="store_true",
                    help="remove it even when a profile pins it (those profiles are unpinned)")
    df = sub.add_parser("default", help="make a managed runtime the default")
    df.add_argument("version", metavar="VERSION", help="id (0.32.0-cpu) or version")
    return parser


def run(args: argparse.Namespace) -> int:
    """Dispatch to the action."""
    action = {
        "list": _list,
        "install": _install,
        "remove": _remove,
        "default": _default,
    }[args.action]
    return int(action(args))


# ------------------------------------------------------------------------------------------


def _load_settings() -> Settings | None:
    from kvpilot.core.app.settings import SettingsStore

    try:
        return SettingsStore().load().settings
    except SettingsError:
        return None


def _list(args: argparse.Namespace) -> int:
    from kvpilot.core.runtimes.discovery import SOURCE_MANAGED, list_runtimes

    installed = store.list_installed()
    settings = _load_settings()
    profiles = settings.profiles if settings is not None else ()
    others = [r for r in list_runtimes() if r.source != SOURCE_MANAGED]
    if args.json:
        doc = {
            "runtimes_dir": str(store.runtimes_root()),
            "default": store.read_default(),
            "managed": [
                {**rt.to_json(), "pinned_by": store.profiles_using(profiles, rt)}
                for rt in installed
            ],
            "other": [
                {"version": r.version, "source": r.source, "location": r.location}
                for r in others
            ],
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"managed runtimes in {store.runtimes_root()}:")
    if not installed:
        print("  none (kvpilot runtime install)")
    for rt in installed:
        mark = "*" if rt.is_default else " "
        state = "ok" if rt.usable else f"not usable: {rt.problem}"
        size = f", {size_text(rt.size_bytes)}" if rt.size_bytes else ""
        pins = store.profiles_using(profiles, rt)
        pinned = f", pinned by {', '.join(pins)}" if pins else ""
        shown = rt.vllm_version or rt.version
        print(f" {mark} {rt.runtime_id:<14} vLLM {shown}{size}{pinned}: {state}")
    if others:
        print("other vLLM installations found:")
        for r in others:
            print(f"   vLLM {r.version} ({r.source}) at {r.location}")
    return 0


class _Printer:
    """Progress on one line (TTY) or one line per phase change / 5 s (pipes)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.last_phase = ""
        self.last_t = 0.0

    def __call__(self, p: InstallProgress) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        text = p.describe()
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text[:120])
            sys.stderr.flush()
        elif p.phase != self.last_phase or now - self.last_t >= 5.0:
            print(text, file=sys.stderr, flush=True)
            self.last_t = now
        self.last_phase = p.phase

    def end(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\n")


def _install(args: argparse.Namespace) -> int:
    from kvpilot.core.hardware import nvml as nvml_mod
    from kvpilot.core.runtimes.installer import RuntimeInstaller
    from kvpilot.core.runtimes.releases import choose_for_this_machine

    choice = choose_for_this_machine(
        version=args.version,
        variant=args.variant,
        nvml_module=nvml_mod.option_replay(args.fake_nvml),
    )
    rel = choice.release
    printer = _Printer(quiet=args.json)
    installer = RuntimeInstaller(
        rel,
        installer=args.installer,
        index_url=args.index_url,
        no_index=args.no_index,
        find_links=args.find_links,
        python=args.python,
        make_default=True if args.make_default else None,
        on_progress=printer,
    )
    how = "measured" if rel.measured else "estimated"
    if not args.json:
        print(
            f"{choice.reason}; into {installer.target} with {installer.installer} "
            f"({size_text(rel.peak_bytes)} of disk while installing, {how})",
            file=sys.stderr,
        )
    if args.dry_run:
        problems = installer.precheck()
        for p in problems:
            print(f"kvpilot: check failed: {p}", file=sys.stderr)
        return 2 if problems else 0
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["result"] = installer.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
            outcome["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=work, name="runtime-install", daemon=True)
    worker.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        print("\nkvpilot: cancelling the install...", file=sys.stderr)
        installer.cancel()
        done.wait(60)
    printer.end()
    err = outcome.get("error")
    if isinstance(err, RuntimeInstallCancelled):
        print(f"kvpilot: {err.message}", file=sys.stderr)
        return 1
    if isinstance(err, RuntimeInstallError):
        if installer.log_path is None:  # failed before anything ran: a user-fixable check
            raise err
        print(f"kvpilot: error: {err.message}", file=sys.stderr)
        return 1
    if err is not None:
        raise err
    result = outcome["result"]
    rt = result.runtime
    if args.json:
        print(json.dumps({**rt.to_json(), "already_installed": result.already_installed,
                          "elapsed_s": round(result.elapsed_s, 1)}, indent=2))
        return 0
    if result.already_installed:
        print(f"vLLM {rt.runtime_id} is already installed at {rt.path}")
    else:
        print(
            f"vLLM {rt.vllm_version} installed at {rt.path} in {result.elapsed_s:.0f} s "
            f"({size_text(rt.size_bytes)}, {rt.flags_count} flags learned; log "
            f"{result.log_path})"
        )
    print(f"default runtime: {store.read_default() or 'none'}")
    return 0


def _remove(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from kvpilot.core.app.settings import SettingsStore, update_profile

    rt = store.resolve_id(args.version)
    settings_store = SettingsStore()
    settings = _load_settings()
    users = store.profiles_using(settings.profiles, rt) if settings is not None else []
    store.remove_runtime(rt.runtime_id, used_by=users, force=args.force)
    print(f"removed vLLM runtime {rt.runtime_id} ({rt.path})")
    if users and settings is not None:
        for name in users:
            settings = update_profile(settings, replace(settings.profile(name), vllm_runtime=""))
        settings_store.save(settings)
        print(f"profile(s) {', '.join(users)} now detect vLLM automatically")
    print(f"default runtime: {store.read_default() or 'none'}")
    return 0


def _default(args: argparse.Namespace) -> int:
    rt = store.set_default(args.version)
    print(f"default runtime: {rt.runtime_id} ({rt.path})")
    return 0
