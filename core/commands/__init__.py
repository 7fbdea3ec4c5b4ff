"""One module per ``kvpilot`` subcommand: each has ``add_parser(subparsers)`` and ``run(args)``."""

from __future__ import annotations

import argparse
from typing import TypeAlias

#: what a command's ``add_parser`` registers itself on (the top-level parser's subcommands)
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
