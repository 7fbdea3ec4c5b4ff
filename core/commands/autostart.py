"""``kvpilot autostart``: start a profile at login, as the window or headless.

    kvpilot autostart enable --profile NAME [--headless]
    kvpilot autostart enable --front A --front B ... --headless [--front-port P]
    kvpilot autostart disable
    kvpilot autostart status [--json]

``enable`` writes the XDG autostart entry that opens the window with the profile, or with
``--headless`` the systemd user unit that runs ``kvpilot serve --profile NAME`` and restarts it
after a failure (:mod:`kvpilot.core.app.autostart`). The profile must exist in the settings file;
its API key stays in the keyring and is never written to either file. ``--front`` (repeated)
serves several profiles behind one address at login (``kvpilot front``), headless only.
"""

from __future__ import annotations

import argparse
import json

from kvpilot.core.app import autostart
from kvpilot.core.commands import Subparsers


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot autostart``."""
    p = subparsers.add_parser(
        "autostart", help="start a profile at login (window or headless)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    en = sub.add_parser("enable", help="start a profile at login")
    who = en.add_mutually_exclusive_group(required=True)
    who.add_argument("--profile", metavar="NAME", help="the settings profile")
    who.add_argument("--front", action="append", metavar="NAME",
                     help="serve this profile behind one address with the others named "
                     "(repeat; needs --headless)")
    en.add_argument("--front-port", type=int, metavar="P",
                    help="the front's port (default: kvpilot front's, 8000)")
    en.add_argument("--headless", action="store_true",
                    help="serve without the window (a systemd user unit) instead of the window")
    for name, text in (("disable", "start nothing at login"), ("status", "what starts")):
        one = sub.add_parser(name, help=text)
        one.add_argument("--json", action="store_true", help="one JSON object")
    en.add_argument("--json", action="store_true", help="one JSON object")
    return p


def _json(found: autostart.AutostartStatus) -> str:
    return json.dumps({
        "mode": found.mode, "profile": found.profile,
        "desktop_file": str(found.desktop_file) if found.desktop_file else None,
        "unit_file": str(found.unit_file) if found.unit_file else None,
        "unit_state": found.unit_state, "note": found.note, "front": list(found.front),
    }, sort_keys=True)


def run(args: argparse.Namespace) -> int:
    """Enable, disable or show; user errors raise KvpilotError (exit 2)."""
    if args.action == "enable":
        from kvpilot.core.app.profile_launch import load_profile

        # an unknown profile is refused now, not at the next login
        names = tuple(args.front or (args.profile,))
        for name in names:
            load_profile(name, need_model=args.headless)
        found = autostart.enable(names[0], headless=args.headless,
                                 front=tuple(args.front or ()), front_port=args.front_port)
    elif args.action == "disable":
        found = autostart.disable()
    else:
        found = autostart.status()
    if args.json:
        print(_json(found))
        return 0
    print(f"kvpilot: {found.describe()}")
    for path in (found.desktop_file, found.unit_file):
        if path is not None:
            print(f"  {path}")
    return 0
