"""Asking another program: its output as text whatever its exit status, no standard input, and
the two ways it can fail to answer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvpilot.core.base.programs import run_for_output


def test_output_and_a_failing_status_come_back_and_a_prompt_reads_end_of_file() -> None:
    script = (
        "import sys\n"
        "print('asked:', sys.stdin.read() == '')\n"
        "print('on stderr', file=sys.stderr)\n"
        "sys.exit(3)\n"
    )
    proc = run_for_output([sys.executable, "-c", script], 30)
    assert proc.returncode == 3
    assert proc.stdout == "asked: True\n"
    assert proc.stderr == "on stderr\n"


def test_the_environment_given_is_the_whole_environment() -> None:
    script = "import os; print(sorted(k for k in os.environ if k.startswith('KVP_PROBE')))"
    proc = run_for_output([sys.executable, "-c", script], 30, {"KVP_PROBE_A": "1"})
    assert proc.stdout.strip() == "['KVP_PROBE_A']"


def test_a_missing_program_and_a_silent_one_raise() -> None:
    with pytest.raises(OSError):
        run_for_output(["/nonexistent/kvpilot-no-such-program"], 5)
    with pytest.raises(subprocess.TimeoutExpired):
        run_for_output([sys.executable, "-c", "import time; time.sleep(30)"], 0.5)
