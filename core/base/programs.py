"""Asking another program something: run it, read what it printed, whatever its exit status.

kvpilot asks helper programs short questions (``vllm --version``, ``pip config list``, an
interpreter's version, ``uv python list``, ``systemctl --user``): each runs with no standard input
(a program that would prompt gets end of file, never waits for a key), its output read as text,
and its exit status left to the caller to judge. :func:`run_for_output` is that one call.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence


def run_for_output(
    argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (no standard input; ``env`` the whole environment, None: this process's) and
    return its exit status and what it printed on stdout and stderr, as text.

    Raises:
        OSError: the program cannot be started (not found, not executable).
        subprocess.TimeoutExpired: it did not finish within ``timeout_s`` seconds (it is killed).
    """
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, env=env,
                          stdin=subprocess.DEVNULL, check=False)
