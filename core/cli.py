"""The ``kvpilot`` entry point.

Subcommands live in :mod:`kvpilot.core.commands`, one module each, imported lazily so that
``kvpilot gpu`` never pays for Qt and ``kvpilot gui`` never pays for the fit tables it does not
use. Every module exposes ``add_parser(subparsers)`` and ``run(args) -> int``.

User errors (:class:`~kvpilot.core.errors.KvpilotError`) end the process with status 2 and a
single line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kvpilot.core import __version__
from kvpilot.core.errors import KvpilotError

#: subcommand name -> module under kvpilot.core.commands (gui lives in kvpilot.gui.cli)
SUBCOMMANDS: dict[str, str] = {
    "gui": "kvpilot.core.commands.gui",
    "plan": "kvpilot.core.commands.plan",
    "recommend": "kvpilot.core.commands.recommend",
    "gpu": "kvpilot.core.commands.gpu",
    "serve": "kvpilot.core.commands.serve",
    "bench": "kvpilot.core.commands.bench",
}


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every subcommand that can be imported."""
    parser = argparse.ArgumentParser(
        prog="kvpilot",
        description="Plan, launch and watch a local vLLM server on one GPU.",
    )
    parser.add_argument("--version", action="version", version=f"kvpilot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("kvpilot."):
                continue  # subcommand not built into this installation
            raise
        sp = module.add_parser(sub)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run kvpilot; returns the process exit status (0 ok, 1 failure, 2 usage/user error)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        # no subcommand: the desktop app is the default
        if "gui" not in _known(parser):
            parser.print_help()
            return 2
        args = parser.parse_args(["gui"])
    try:
        return int(args._run(args) or 0)
    except KvpilotError as err:
        print(f"kvpilot: error: {err.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _known(parser: argparse.ArgumentParser) -> set[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    return set()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
