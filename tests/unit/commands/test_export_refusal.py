"""``kvpilot export`` of a plan predicted not to start: refused with the reason (exit 1) unless
``--force``, which exports it with the reason as a warning on stderr."""

from __future__ import annotations

from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.cli import main

MODEL = DATA / "models" / "qwen2.5-7b-instruct"
#: the desktop snapshot leaves about 22.15 of 23.65 GiB free: 0.95 does not pass vLLM's check
ARGV = ["export", "--model", str(MODEL), "--max-model-len", "8192", "--vllm-version", "0.11.0",
        "--gpu-memory-utilization", "0.95"]


@pytest.fixture(autouse=True)
def _desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path))


def test_a_plan_that_does_not_fit_is_not_exported(capsys: pytest.CaptureFixture) -> None:
    assert main(ARGV) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "not exported" in err and "--force" in err
    assert "at most --gpu-memory-utilization 0.91 would start" in err
    assert err.count("\n") == 1  # one sentence


def test_force_exports_it_with_a_warning(capsys: pytest.CaptureFixture) -> None:
    assert main([*ARGV, "--force"]) == 0
    out, err = capsys.readouterr()
    assert "vllm serve" in out and "--gpu-memory-utilization 0.95" in out
    assert "does not fit" in out.replace("\n# ", " ")  # the header says so too
    assert err.startswith("kvpilot: warning:") and "would start" in err


def test_a_plan_that_fits_exports_with_exit_0(capsys: pytest.CaptureFixture) -> None:
    assert main([*ARGV[:-1], "0.9"]) == 0
    out, err = capsys.readouterr()
    assert "--gpu-memory-utilization 0.9" in out and err == ""
