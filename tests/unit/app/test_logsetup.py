"""Logging is set up once: a rotating file in the data directory, warnings on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_the_cli_logs_to_one_rotating_file_in_the_data_dir(tmp_path: Path) -> None:
    code = (
        "import logging, sys\n"
        "from kvpilot.core.app import logsetup\n"
        "first = logsetup.configure()\n"
        "again = logsetup.configure()\n"
        "logging.getLogger('kvpilot.test').warning('disk almost full')\n"
        "logging.getLogger('kvpilot.test').info('planned')\n"
        "root = logging.getLogger('kvpilot')\n"
        "print(first, again, len(root.handlers))\n"
    )
    env = {"KVPILOT_DATA_DIR": str(tmp_path / "data"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=True)
    first, again, handlers = proc.stdout.split()
    log_file = tmp_path / "data" / "logs" / "kvpilot.log"
    assert first == again == str(log_file) and handlers == "2"
    text = log_file.read_text()
    assert "WARNING kvpilot.test: disk almost full" in text and "planned" in text
    assert proc.stderr.strip() == "kvpilot: WARNING: disk almost full"


def test_an_unwritable_log_folder_falls_back_to_stderr(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    code = (
        "from pathlib import Path\n"
        "from kvpilot.core.app import logsetup\n"
        f"print(logsetup.configure(Path({str(blocked / 'logs')!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.strip() == "None"
    assert f"kvpilot's log folder {blocked / 'logs'} cannot be written" in proc.stderr
    assert "set KVPILOT_LOG_DIR" in proc.stderr and "logging to stderr only" in proc.stderr
