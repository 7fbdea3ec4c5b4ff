"""The ``kvpilot`` entry point.

Subcommands live in :mod:`kvpilot.core.commands`, one module each, imported lazily so that
``kvpilot gpu`` never pays for Qt and ``kvpilot gui`` never pays for the fit tables it does not
use. Every module exposes ``add_parser(subparsers)`` and ``run(args) -> int``.

User errors (:class:`~kvpilot.core.base.errors.KvpilotError`) end the process with status 2 and a
single line on stderr, never a traceback; so does an ``OSError`` met in one of kvpilot's own
folders (a read-only data folder) or in an unreadable ``/proc``
(:func:`kvpilot.core.app.environment.environment_problem`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from kvpilot.core.app import logsetup
from kvpilot.core.base.errors import KvpilotError

#: subcommand name -> (module under kvpilot.core.commands, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "gui": ("kvpilot.core.commands.gui", "open the desktop app (the default)"),
    "plan": ("kvpilot.core.commands.plan", "predict vLLM's memory budget for one configuration"),
    "recommend": ("kvpilot.core.commands.recommend", "rank complete deployments for a GPU"),
    "gpu": ("kvpilot.core.commands.gpu", "show GPUs, processes and the launch budget now"),
    "serve": ("kvpilot.core.commands.serve", "launch and supervise vllm serve"),
    "autostart": ("kvpilot.core.commands.autostart", "start a profile at login"),
    "profile": ("kvpilot.core.commands.profile", "list, show, add, edit and remove profiles"),
    "front": (
        "kvpilot.core.commands.front",
        "serve several profiles behind one OpenAI-compatible address",
    ),
    "runs": ("kvpilot.core.commands.runs", "list and compare the server runs kept"),
    "bench": ("kvpilot.core.commands.bench", "load-test a running OpenAI-compatible server"),
    "watch": ("kvpilot.core.commands.watch", "watch any running vLLM server"),
    "chat": ("kvpilot.core.commands.chat", "send a message to a running server, stream the reply"),
    "export": (
        "kvpilot.core.commands.export",
        "print the plan as a command, docker run, compose file or Helm values",
    ),
    "catalog": ("kvpilot.core.commands.catalog", "list the models the recommender ranks"),
    "search": ("kvpilot.core.commands.search", "find Hugging Face models that fit this GPU"),
    "runtime": ("kvpilot.core.commands.runtime", "install, list and remove managed vLLM runtimes"),
    "install-desktop-entry": (
        "kvpilot.core.commands.desktop",
        "add kvpilot to the desktop's application menu (--uninstall removes it)",
    ),
}


class _VersionAction(argparse.Action):
    """``--version``: the installed version, read only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from kvpilot.core import version

        print(f"kvpilot {version()}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported (the others are listed by name)."""
    parser = argparse.ArgumentParser(
        prog="kvpilot",
        description="Plan, launch and watch a local vLLM server on one GPU.",
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        if name != command:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        module = importlib.import_module(module_name)
        sp = module.add_parser(sub)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run kvpilot; returns the process exit status (0 ok, 1 failure, 2 usage/user error)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    if command not in SUBCOMMANDS:
        command = None if any(a in ("-h", "--help", "--version") for a in args_list) else command
    if command is None and not args_list:
        command, args_list = "gui", ["gui"]
    try:
        parser = build_parser(command)
    except ImportError as exc:
        print(f"kvpilot: error: the '{command}' command cannot load: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(args_list)
    logsetup.configure()
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except KvpilotError as err:
        print(f"kvpilot: error: {err.message}", file=sys.stderr)
        return int(getattr(err, "exit_status", 2))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.: drop the rest quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        from kvpilot.core.app.environment import environment_problem

        problem = environment_problem(exc)
        if problem is None:
            raise
        print(f"kvpilot: error: {problem.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
