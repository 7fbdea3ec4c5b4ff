"""``kvpilot install-desktop-entry [--uninstall]``: kvpilot in the desktop's application menu.

Writes the .desktop file and icons into the XDG data dir of the current user, with the absolute
path of the executable that runs kvpilot now; ``--uninstall`` removes them.
"""

from __future__ import annotations

import argparse

from kvpilot.core.app import desktop
from kvpilot.core.commands import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``install-desktop-entry`` on the top-level parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "install-desktop-entry",
        help="add kvpilot to the desktop's application menu (this user)",
        description=(
            "Write kvpilot.desktop and its icons into $XDG_DATA_HOME (default ~/.local/share) "
            "with the absolute path of this kvpilot executable."
        ),
    )
    parser.add_argument("--uninstall", action="store_true", help="remove them again")
    return parser


def run(args: argparse.Namespace) -> int:
    """Install or remove the entry; prints what changed."""
    if args.uninstall:
        entry = desktop.uninstall_desktop_entry()
        n = len(entry.icon_files)
        print(f"removed {entry.desktop_file} and {n} icon(s)")
        return 0
    entry = desktop.install_desktop_entry()
    print(f"wrote {entry.desktop_file} (Exec={entry.exec_line}) and "
          f"{len(entry.icon_files)} icons")
    return 0
