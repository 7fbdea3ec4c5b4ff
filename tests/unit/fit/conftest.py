"""Fixtures for fit-engine tests."""

from __future__ import annotations

import pytest
from fitkit import fixture_spec

from kvpilot.core.models.spec import ModelSpec
from kvpilot.core.units import GiB


@pytest.fixture
def qwen7b() -> ModelSpec:
    # Qwen2.5-7B-Instruct: 15,231,233,024 bytes of bf16 weights
    return fixture_spec("qwen2.5-7b-instruct", 15_231_233_024)


@pytest.fixture
def llama8b() -> ModelSpec:
    return fixture_spec("llama-3.1-8b-instruct", 16_060_522_496)


@pytest.fixture
def gptoss() -> ModelSpec:
    return fixture_spec("gpt-oss-20b", int(13.47 * GiB))
