"""Log levels for the log view, from recorded vLLM 0.32 (CPU) output lines."""

from __future__ import annotations

import pytest
from testpaths import DATA

from kvpilot.core.vllm.loglevel import LEVELS, line_level

LOGS = DATA / "vllm_logs" / "cpu_0.32"


def _line(name: str, needle: str) -> str:
    """The first line of a recorded log that contains ``needle``."""
    for line in (LOGS / name).read_text(encoding="utf-8").splitlines():
        if needle in line:
            return line
    raise AssertionError(f"{needle!r} not in {name}")


@pytest.mark.parametrize(
    ("name", "needle", "level"),
    [
        ("startup.log", "version 0.32.0", "INFO"),
        ("fail_g_head_dim_16.log", "EngineDeadError", "ERROR"),
        ("fail_g_head_dim_16.log", "AsyncLLM output_handler failed", "ERROR"),
    ],
)
def test_the_prefix_level_wins_on_either_stream(name: str, needle: str, level: str) -> None:
    line = _line(name, needle)
    assert line_level(line, "stdout") == level
    assert line_level(line, "stderr") == level


def test_unprefixed_stderr_lines_are_guessed() -> None:
    warning = _line("startup.log", "FutureWarning: `torch.distributed.reduce_op`")
    assert line_level(warning, "stderr") == "WARNING"
    assert line_level("RuntimeError: CUDA error: out of memory", "stderr") == "WARNING"
    triton = _line("startup.log", "Triton is installed, but doesn't include CPU backend")
    assert line_level(triton, "stderr") == "INFO"
    assert line_level("Loading safetensors checkpoint shards:   0% Completed", "stderr") == "INFO"


def test_unprefixed_stdout_lines_are_info() -> None:
    assert line_level("RuntimeError: something printed to stdout", "stdout") == "INFO"
    assert line_level("", "stdout") == "INFO"


def test_levels_cover_every_result() -> None:
    assert {line_level("WARNING 11-29 08:09:54 [x.py:1] w"), line_level("plain")} <= set(LEVELS)
