"""Fixtures of the command tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def isolated_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as the command tests see it: no NVIDIA driver, no vLLM installed, data and
    Hugging Face cache in the test's own folder."""
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "no-driver")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
