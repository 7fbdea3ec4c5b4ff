"""Conversations: what goes back to the server, the settings' ranges, the JSON round trip."""

from __future__ import annotations

import pytest

from kvpilot.core.base.conversation import (
    ChatMessage,
    ChatSettings,
    Conversation,
    ReplyStats,
    request_messages,
)

IMAGE = "data:image/png;base64,AA=="


def test_the_system_prompt_comes_first_and_failed_turns_stay_out() -> None:
    history = (
        ChatMessage("user", "first"),
        ChatMessage("assistant", "answer"),
        ChatMessage("user", "long " * 10),
        ChatMessage("assistant", "half a rep", error="The conversation is too long."),
        ChatMessage("user", "stopped early"),
        ChatMessage("assistant", ""),  # stopped before any text
        ChatMessage("user", "short", image_url=IMAGE),
    )
    assert request_messages(ChatSettings(system_prompt="Be brief."), history) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "stopped early"},
        {"role": "user", "content": [
            {"type": "text", "text": "short"},
            {"type": "image_url", "image_url": {"url": IMAGE}},
        ]},
    ]
    assert request_messages(ChatSettings(system_prompt="  "), history[:1]) == [
        {"role": "user", "content": "first"}
    ]


def test_settings_are_clamped_into_their_ranges() -> None:
    assert ChatSettings(temperature=-1, max_tokens=0).checked() == ChatSettings(
        temperature=0.0, max_tokens=1
    )
    assert ChatSettings(temperature=7, max_tokens=10**9).checked().temperature == 2.0
    assert ChatSettings(max_tokens=10**9).checked().max_tokens == 1_000_000


def test_messages_round_trip_and_bad_ones_raise() -> None:
    stats = ReplyStats(ttft_s=None, duration_s=0.5, prompt_tokens=None, completion_tokens=0,
                       tokens_per_s=None, stopped=True)
    for m in (
        ChatMessage("user", "hi", image_url=IMAGE),
        ChatMessage("assistant", "yes", stats=stats),
        ChatMessage("assistant", "", error="The server at x is gone."),
    ):
        assert ChatMessage.from_dict(m.to_dict()) == m
    for bad in ([], {"role": "system", "text": "x"}, {"role": "user", "text": 3}, {"text": "x"},
                {"role": "assistant", "text": "x", "stats": {"completion_tokens": 1}}):
        with pytest.raises((TypeError, ValueError, KeyError)):
            ChatMessage.from_dict(bad)
    # an image that is not a data: URL is not kept (nothing is fetched from elsewhere)
    assert ChatMessage.from_dict({"role": "user", "text": "x", "image_url": "file:///etc/x"}) == (
        ChatMessage("user", "x")
    )


def test_clearing_keeps_the_settings() -> None:
    conv = Conversation(ChatSettings(system_prompt="s")).add(ChatMessage("user", "x"))
    assert conv.cleared() == Conversation(ChatSettings(system_prompt="s"))
