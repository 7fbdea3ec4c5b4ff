"""Fixtures for the vLLM runtime / command / log tests: a fake ``vllm`` program and log data."""

from __future__ import annotations

import stat
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "vllm_logs"
HELP_EXCERPT = DATA_DIR / "serve_help_0.33_excerpt.txt"


@pytest.fixture
def data_dir() -> Path:
    """tests/data/vllm_logs."""
    return DATA_DIR


@pytest.fixture
def make_fake_vllm(tmp_path: Path) -> Callable[..., Path]:
    """Build an executable that answers ``--version`` and ``serve --help=all`` like vLLM.

    Every call is appended to ``<dir>/calls.log`` so tests can count real invocations.
    """

    def make(
        version: str = "0.33.0",
        *,
        help_text: str | None = None,
        name: str = "vllm",
        folder: Path | None = None,
        version_rc: int = 0,
        noise: str = "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    ) -> Path:
        where = folder or tmp_path / "env" / "bin"
        where.mkdir(parents=True, exist_ok=True)
        help_file = where / f"{name}.help.txt"
        help_file.write_text(help_text if help_text is not None else HELP_EXCERPT.read_text())
        script = where / name
        script.write_text(
            f"#!{sys.executable}\n"
            + textwrap.dedent(
                f"""
                import sys
                from pathlib import Path
                here = Path(__file__).resolve().parent
                with open(here / "calls.log", "a") as fh:
                    fh.write(" ".join(sys.argv[1:]) + "\\n")
                args = sys.argv[1:]
                if args == ["--version"]:
                    print({noise!r}, file=sys.stderr)
                    print({noise!r})
                    print({version!r})
                    sys.exit({version_rc})
                if args[:2] == ["serve", "--help=all"]:
                    print((here / {help_file.name!r}).read_text())
                    sys.exit(0)
                print("vllm: error: unrecognized arguments: " + " ".join(args), file=sys.stderr)
                sys.exit(2)
                """
            )
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return script

    return make


def _call_count(script: Path, prefix: str) -> int:
    log = script.parent / "calls.log"
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.startswith(prefix))


@pytest.fixture
def call_count() -> Callable[[Path, str], int]:
    """``call_count(script, prefix)``: runs of a fake vllm whose arguments start with prefix."""
    return _call_count
