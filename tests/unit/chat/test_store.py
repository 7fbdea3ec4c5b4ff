"""The conversation store: atomic writes, one file per profile, damaged files set aside, clear."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvpilot.core.base.conversation import (
    ChatMessage,
    ChatSettings,
    Conversation,
    ReplyStats,
)
from kvpilot.core.chat.store import ChatStoreError, ConversationStore, file_name

STATS = ReplyStats(
    ttft_s=0.21, duration_s=1.5, prompt_tokens=42, completion_tokens=24, tokens_per_s=18.0,
    finish_reason="length",
)


def _conversation() -> Conversation:
    return Conversation(
        ChatSettings(system_prompt="Be brief.", temperature=0.2, max_tokens=64),
        (
            ChatMessage(
                "user", "What is a KV cache?\nIn one line.", image_url="data:image/png;base64,AA=="
            ),
            ChatMessage("assistant", "The keys and values of past tokens.", stats=STATS),
            ChatMessage("user", "x" * 5000),
            ChatMessage("assistant", "", error="The conversation is too long for the context."),
        ),
    )


def test_a_conversation_comes_back_as_it_was_saved(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "chats")
    conv = _conversation()
    store.save("default", conv)
    got = store.load("default")
    assert got.warning is None and got.conversation == conv
    assert store.path("default").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in (tmp_path / "chats").iterdir()] == [file_name("default")]  # no temp


def test_each_profile_has_its_own_file(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    a = Conversation().add(ChatMessage("user", "for a"))
    b = Conversation().add(ChatMessage("user", "for b"))
    names = ["4090 / long context", "4090 _ long context", "ü"]
    store.save(names[0], a)
    store.save(names[1], b)
    assert store.load(names[0]).conversation == a
    assert store.load(names[1]).conversation == b
    assert store.load(names[2]).conversation == Conversation()
    assert len({file_name(n) for n in names}) == 3
    assert all("/" not in file_name(n) for n in names)


def test_a_failed_write_keeps_the_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ConversationStore(tmp_path)
    old = Conversation().add(ChatMessage("user", "kept"))
    store.save("p", old)

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ChatStoreError, match="is full"):
        store.save("p", old.add(ChatMessage("user", "lost")))
    monkeypatch.undo()
    assert store.load("p").conversation == old
    assert sorted(p.name for p in tmp_path.iterdir()) == [file_name("p")]


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[1, 2]",
        json.dumps({"version": 99, "messages": []}),
        json.dumps({"version": 1, "messages": [{"role": "robot", "text": "?"}]}),
        json.dumps({"version": 1, "messages": [{"role": "user"}]}),
        json.dumps({"version": 1, "messages": "all of them"}),
        json.dumps({"version": 1, "settings": {"temperature": "warm"}, "messages": []}),
        json.dumps({"version": 1, "messages": [
            {"role": "assistant", "text": "a", "stats": {"duration_s": [1]}}]}),
        b"\xff\xfe\x00garbage".decode("latin-1"),
    ],
)
def test_a_damaged_file_is_set_aside_with_a_warning(tmp_path: Path, text: str) -> None:
    store = ConversationStore(tmp_path)
    path = store.path("p")
    path.write_text(text, encoding="utf-8")
    got = store.load("p")
    assert got.conversation == Conversation()
    assert got.warning is not None and "profile 'p' could not be read" in got.warning
    aside = path.with_name(path.name + ".damaged")
    assert str(aside) in got.warning and aside.read_text(encoding="utf-8") == text
    assert not path.exists()
    store.save("p", Conversation().add(ChatMessage("user", "new")))  # a new one starts
    assert store.load("p").warning is None and aside.exists()


def test_clear_forgets_the_messages_and_keeps_the_settings(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    conv = _conversation()
    store.save("p", conv)
    store.clear("p", conv.settings)
    got = store.load("p").conversation
    assert got.messages == () and got.settings == conv.settings
    store.clear("p")
    assert not store.path("p").exists()
    store.clear("never-saved")  # nothing to remove: no error
    assert store.load("p").conversation == Conversation()


def test_settings_out_of_range_are_clamped_on_load(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    store.path("p").parent.mkdir(parents=True, exist_ok=True)
    store.path("p").write_text(json.dumps(
        {"version": 1, "settings": {"temperature": 9, "max_tokens": -3}, "messages": []}
    ))
    s = store.load("p").conversation.settings
    assert (s.temperature, s.max_tokens) == (2.0, 1)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=200) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["version", "settings", "messages", "role", "text", "stats",
                         "temperature", "max_tokens", "duration_s", "completion_tokens"]),
        inner, max_size=4),
    max_leaves=10,
).map(json.dumps))
def test_any_file_loads_or_is_set_aside(tmp_path: Path, text: str) -> None:
    store = ConversationStore(tmp_path / "fuzz")
    store.path("p").parent.mkdir(parents=True, exist_ok=True)
    store.path("p").write_text(text, encoding="utf-8")
    got = store.load("p")  # never raises
    assert isinstance(got.conversation, Conversation)
    assert (got.warning is None) == store.path("p").exists()
    store.path("p").unlink(missing_ok=True)
    store.path("p").with_name(store.path("p").name + ".damaged").unlink(missing_ok=True)
