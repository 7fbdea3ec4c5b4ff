"""``--speculative-config`` read once (kvpilot.core.base.speculative_config), with the rules of
vLLM's ``SpeculativeConfig`` (config/speculative.py in the 0.32.0 wheel)."""

from __future__ import annotations

import json

import pytest

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.speculative_config import (
    SpeculativeSettings,
    parse_speculative_config,
    speculative_settings,
)


def _config(**values: object) -> str:
    return json.dumps(values)


def test_every_field_is_read() -> None:
    text = _config(method="eagle3", model=" org/eagle3-head ", num_speculative_tokens=3,
                   draft_tensor_parallel_size=1)
    assert parse_speculative_config(text) == SpeculativeSettings(
        method="eagle3", num_speculative_tokens=3, model="org/eagle3-head",
        draft_tensor_parallel_size=1)


@pytest.mark.parametrize(("values", "method"), [
    # every *_mtp spelling is replaced with mtp ("method `...` is deprecated")
    ({"method": "qwen3_5_mtp", "num_speculative_tokens": 2}, "mtp"),
    ({"method": "deepseek_mtp"}, "mtp"),
    # "[ngram]" is vLLM's other spelling of ngram
    ({"method": "[ngram]", "num_speculative_tokens": 3}, "ngram"),
])
def test_methods_are_normalised_as_vllm_does(values: dict[str, object], method: str) -> None:
    assert parse_speculative_config(_config(**values)).method == method


def test_a_method_without_a_network_names_no_draft() -> None:
    settings = parse_speculative_config(_config(method="ngram", model="ngram",
                                                num_speculative_tokens=3))
    assert settings.model is None


def test_a_draft_checkpoint_may_leave_the_count_to_its_n_predict() -> None:
    """vLLM takes ``n_predict`` of the draft's config when the count is not given; n-gram
    lookup has no such default and is refused."""
    settings = parse_speculative_config(_config(method="eagle", model="org/eagle-head"))
    assert settings.num_speculative_tokens is None
    with pytest.raises(FitError, match="num_speculative_tokens"):
        parse_speculative_config(_config(method="ngram_gpu"))


@pytest.mark.parametrize(("text", "says"), [
    (_config(method=3), "method must be text"),
    (_config(method="mtp", model=["a"]), "model must be text"),
    (_config(method="mtp", num_speculative_tokens=True), "whole number"),
    (_config(method="eagle", model="x", draft_tensor_parallel_size=0), "at least 1"),
    (_config(method="dflash", num_speculative_tokens=2), "needs the draft"),
])
def test_malformed_fields_are_one_sentence(text: str, says: str) -> None:
    with pytest.raises(FitError, match=says):
        parse_speculative_config(text)


@pytest.mark.parametrize("text", [None, "", "  ", "{oops", "[1]", _config(method="eagle3")])
def test_the_lenient_reading_gives_none_for_what_vllm_refuses(text: str | None) -> None:
    assert speculative_settings(text) is None


def test_the_lenient_reading_agrees_with_the_strict_one() -> None:
    text = _config(method="mtp", num_speculative_tokens=2)
    assert speculative_settings(text) == parse_speculative_config(text)
