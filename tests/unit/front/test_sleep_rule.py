"""When a runtime and a platform allow vLLM's sleep mode (kvpilot.core.front.sleep)."""

from __future__ import annotations

import pytest

from kvpilot.core.front.sleep import SLEEP_MODE_SINCE, sleep_support


@pytest.mark.parametrize(
    ("version", "cuda", "allowed", "words"),
    [
        ("0.33.0", True, True, "idle profiles sleep"),
        ("0.10.2", True, True, "idle profiles sleep"),  # the first documented release
        ("0.10.2rc1", True, True, "idle profiles sleep"),  # a pre-release counts as its release
        ("0.10.1", True, False, "predates the sleep endpoints"),
        ("0.8.5", True, False, "predates the sleep endpoints"),
        ("0.32.0+cpu", True, False, "needs an NVIDIA GPU"),  # the CPU build
        ("0.32.0", False, False, "needs an NVIDIA GPU"),  # the CPU backend
        ("0.33.0+rocm", True, False, "CUDA only"),
        ("0.33.0+cu128", True, True, "idle profiles sleep"),
    ],
)
def test_sleep_rule(version: str, cuda: bool, allowed: bool, words: str) -> None:
    support = sleep_support(version, cuda_device=cuda)
    assert support.allowed is allowed
    assert words in support.reason
    assert support.reason.endswith(("instead", "next request"))


def test_the_documented_release_is_the_floor() -> None:
    assert SLEEP_MODE_SINCE == "0.10.2"
