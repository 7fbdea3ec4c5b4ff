"""``kvpilot gui``: the desktop app (also what plain ``kvpilot`` runs).

The Qt application lives in :mod:`kvpilot.gui.app`; it is imported only when this command runs,
so the rest of the CLI never loads Qt and ``kvpilot.core`` stays free of it.
"""

from __future__ import annotations

import argparse
import importlib

from kvpilot.core.commands import Subparsers

PANELS = ("planner", "dashboard", "log", "fallback", "settings", "chat")


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``gui`` and its options."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "gui",
        help="open the desktop app (the default)",
        description="Open the kvpilot window: GPU, planner, server, live dashboard.",
    )
    add_arguments(parser)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``gui`` options (``kvpilot gui``; see :func:`kvpilot.gui.app.main`)."""
    parser.add_argument(
        "--screenshot",
        metavar="PATH",
        help="render the window offscreen once it has loaded, save it as PNG and exit",
    )
    parser.add_argument(
        "--fake-gpu",
        metavar="NAME",
        help="replay a recorded GPU instead of NVML (rtx4090-desktop, no-driver, ...)",
    )
    parser.add_argument(
        "--panel",
        choices=PANELS,
        default="planner",
        help="panel to show first (and to capture with --screenshot)",
    )
    parser.add_argument(
        "--failure-log",
        metavar="PATH",
        help="with --panel fallback or log: classify this recorded vLLM log, show its failure "
        "banner and its lines in the log view",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="open with this settings profile active (what the autostart entry passes)",
    )
    parser.add_argument(
        "--screenshot-size",
        type=_size,
        default=(1400, 940),
        metavar="WxH",
        help="the window's size for --screenshot (default 1400x940; 1366x768 shows a laptop)",
    )
    parser.add_argument(
        "--screenshot-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="give up waiting for the window to load after this long (default 60)",
    )


def _size(text: str) -> tuple[int, int]:
    """``1366x768`` -> (1366, 768), for argparse."""
    width, sep, height = text.lower().partition("x")
    if sep and width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0:
        return int(width), int(height)
    raise argparse.ArgumentTypeError(f"{text!r} is not a size like 1366x768")


def run(args: argparse.Namespace) -> int:
    """Run the app; returns its exit status."""
    from kvpilot.core.app import startup_gc
    from kvpilot.core.app.secrets import prefetch_keyring

    startup_gc.hold_during_start()  # until the window has painted (see the module)
    try:
        prefetch_keyring()  # looks for the keyring while Qt loads (see its docstring)
        app = importlib.import_module("kvpilot.gui.app")
        return int(app.main(args))
    finally:
        startup_gc.settle_after_start()  # a start that failed before its first paint
