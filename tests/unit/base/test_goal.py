"""The one goal type and the context parser both faces use."""

from __future__ import annotations

import pytest

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.goal import (
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
    Goal,
    min_weight_bits_for,
    parse_context_tokens,
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("8192", 8192), ("32,768", 32768), ("32_768", 32768), (" 32k ", 32768), ("32K", 32768),
     ("1.5k", 1536), ("128k", 131072), ("16", MIN_CONTEXT_TOKENS)],
)
def test_contexts_as_people_write_them(text: str, tokens: int) -> None:
    assert parse_context_tokens(text) == tokens


@pytest.mark.parametrize("text", ["", "lots", "8", "-4096", "nan", "inf", "1e12", "32kk", "k"])
def test_a_context_that_is_not_a_token_count_names_the_text_and_an_example(text: str) -> None:
    with pytest.raises(FitError) as got:
        parse_context_tokens(text)
    assert repr(text.strip()[:40]) in got.value.message
    assert "e.g. 8192 or 32k" in got.value.message
    assert f"{MAX_CONTEXT_TOKENS:,}" in got.value.message


def test_a_goal_says_what_is_wrong_with_it() -> None:
    assert Goal().problems() == []
    wrong = Goal(use_case="poetry", context_tokens=8, users=0, min_weight_bits=3).problems()
    assert len(wrong) == 4
    assert "'poetry' is unknown" in wrong[0] and "chat" in wrong[0]
    assert "context 8 tokens" in wrong[1]
    assert "users 0" in wrong[2]
    assert "3 bits" in wrong[3]


def test_the_4bit_choice_is_the_quality_floor() -> None:
    assert min_weight_bits_for(True) == 4 and min_weight_bits_for(False) == 8
    assert Goal(min_weight_bits=4).allows_4bit and not Goal(min_weight_bits=8).allows_4bit
