"""PyInstaller runtime hook: the program is the launcher script, not the bootloader behind it.

``kvpilot`` in the bundle is a shell script (packaging/launcher.sh) that checks the C library's
version and then runs ``kvpilot.bin``. Where kvpilot names itself (the .desktop file's Exec line,
Qt's application name, a restart) it should name the launcher, so the check stays in front.
"""

import os
import sys
from pathlib import Path


def _adopt_launcher() -> None:
    launcher = os.environ.pop("KVPILOT_LAUNCHER", None)
    if launcher and Path(launcher).is_file():
        sys.executable = launcher
        if sys.argv:
            sys.argv[0] = launcher


_adopt_launcher()
