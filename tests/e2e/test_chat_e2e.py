"""The chat client against the real vLLM CPU engine (tiny random Llama with a ChatML template).

One server of this module's own, started with an API key, serves every test; the last test
stops it and asks again. The tiny model is random, so the text is noise: the tests check the
stream's structure (pieces arrive, usage agrees with vLLM's own tokenizer, TTFT > 0, stop
cuts the reply) and the one-sentence errors (context too long, refused key, server gone).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from kvpilot.core.base.conversation import ChatMessage, ChatSettings, Conversation
from kvpilot.core.chat import errors
from kvpilot.core.chat.client import ChatCall, ChatTarget, request_body
from kvpilot.core.chat.errors import ChatError
from kvpilot.core.chat.store import ConversationStore
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.supervisor import Supervisor

from .conftest import READY_TIMEOUT_S
from .servekit import kvpilot_argv

API_KEY = "chat-e2e-key-1"


@pytest.fixture(scope="module")
def keyed_server(
    vllm_runtime: VllmRuntime,
    launch_spec: Callable[..., LaunchSpec],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Supervisor]:
    """A real vLLM server of the tiny model that wants ``API_KEY``; stopped at the end."""
    sup = Supervisor(
        vllm_runtime, launch_spec(api_key=API_KEY), data_dir=tmp_path_factory.mktemp("chat-data")
    )
    sup.start()
    try:
        if not sup.wait_ready(READY_TIMEOUT_S):
            tail = "\n".join(sup.lines()[-40:])
            pytest.fail(f"vLLM did not become ready ({sup.state}, {sup.failure}):\n{tail}")
        yield sup
    finally:
        assert sup.stop().clean


def _target(sup: Supervisor, key: str | None = API_KEY) -> ChatTarget:
    return ChatTarget(base_url=f"{sup.base_url}/v1", model=sup.model_name, api_key=key)


def _user(text: str) -> tuple[ChatMessage, ...]:
    return (ChatMessage(role="user", text=text),)


def _tokenized(sup: Supervisor, body: dict[str, object]) -> int:
    """vLLM's own count of the prompt tokens of ``body``'s messages (its /tokenize endpoint)."""
    r = httpx.post(
        f"{sup.base_url}/tokenize",
        json={"model": body["model"], "messages": body["messages"], "add_generation_prompt": True},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=30,
    )
    r.raise_for_status()
    return int(r.json()["count"])


def test_a_streamed_reply_has_pieces_ttft_and_the_servers_token_counts(
    keyed_server: Supervisor,
) -> None:
    settings = ChatSettings(system_prompt="You answer in one line.", temperature=0.0, max_tokens=24)
    history = _user("hello model, what is the river north of the city?")
    pieces: list[str] = []
    reply = ChatCall(_target(keyed_server), settings, history).run(pieces.append)
    stats = reply.stats

    assert len(pieces) >= 2  # streamed, not one block
    assert "".join(pieces) == reply.text and reply.text
    assert stats.ttft_s is not None and 0 < stats.ttft_s <= stats.duration_s
    assert not stats.counted and not stats.stopped  # the usage chunk came
    assert stats.finish_reason in ("stop", "length")
    assert 1 <= stats.completion_tokens <= 24
    if stats.finish_reason == "length":
        assert stats.completion_tokens == 24
    assert len(pieces) <= stats.completion_tokens  # a piece is one token or more
    body = request_body(_target(keyed_server), settings, history)
    assert stats.prompt_tokens == _tokenized(keyed_server, body)
    assert stats.tokens_per_s is None or stats.tokens_per_s > 0  # None: all in one burst


def test_a_conversation_goes_back_to_the_server_and_is_kept(
    keyed_server: Supervisor, tmp_path: Path
) -> None:
    """Two turns: the second request carries the first reply (its prompt is longer), and the
    kept file gives the same conversation back."""
    settings = ChatSettings(temperature=0.5, max_tokens=8)
    conv = Conversation(settings).add(ChatMessage("user", "one two three"))
    first = ChatCall(_target(keyed_server), settings, conv.messages).run()
    conv = conv.add(first.message()).add(ChatMessage("user", "and four?"))
    second = ChatCall(_target(keyed_server), settings, conv.messages).run()
    assert first.stats.prompt_tokens is not None and second.stats.prompt_tokens is not None
    assert second.stats.prompt_tokens > first.stats.prompt_tokens + first.stats.completion_tokens
    conv = conv.add(second.message())

    store = ConversationStore(tmp_path / "chats")
    store.save("tiny", conv)
    assert store.load("tiny").conversation == conv


def test_stop_cuts_the_reply_and_the_server_keeps_serving(keyed_server: Supervisor) -> None:
    call = ChatCall(_target(keyed_server), ChatSettings(max_tokens=900), _user("tell a story"))
    first = threading.Event()
    seen: list[str] = []

    def on_text(piece: str) -> None:
        seen.append(piece)
        first.set()

    def stopper() -> None:
        if first.wait(120):
            call.stop()

    t = threading.Thread(target=stopper)
    t.start()
    reply = call.run(on_text)
    t.join(10)
    assert reply.stats.stopped
    assert not reply.stats.counted  # vLLM's running usage: the server's own count
    assert reply.stats.ttft_s is not None and reply.stats.ttft_s > 0
    assert 1 <= reply.stats.completion_tokens < 900
    assert reply.text == "".join(seen)
    again = ChatCall(_target(keyed_server), ChatSettings(max_tokens=4), _user("still there?")).run()
    assert again.stats.completion_tokens >= 1 and not again.stats.stopped


def test_a_prompt_longer_than_the_context_is_one_sentence(keyed_server: Supervisor) -> None:
    words = " ".join(["mountain river city"] * 800)  # well over 1,024 tokens
    with pytest.raises(ChatError) as caught:
        ChatCall(_target(keyed_server), ChatSettings(max_tokens=8), _user(words)).run()
    err = caught.value
    assert err.kind == errors.KIND_CONTEXT and err.status_code == 400
    assert "maximum context length is 1024 tokens" in err.detail  # vLLM's own words
    assert str(err).startswith("The conversation is too long for the model's context (1,024")
    assert str(err).count(". ") == 0 and str(err).endswith(".")


def test_a_wrong_api_key_is_the_401_sentence(keyed_server: Supervisor) -> None:
    for key in ("not-the-key", None):
        with pytest.raises(ChatError) as caught:
            ChatCall(_target(keyed_server, key), ChatSettings(max_tokens=4), _user("hi")).run()
        assert caught.value.kind == errors.KIND_AUTH and caught.value.status_code == 401
        assert "refused the API key (401 Unauthorized)" in str(caught.value)
        assert "not-the-key" not in str(caught.value) and API_KEY not in str(caught.value)


def test_kvpilot_chat_streams_a_reply_from_the_command_line(
    keyed_server: Supervisor, tmp_path: Path
) -> None:
    env = {**os.environ, "CHAT_KEY": API_KEY, "KVPILOT_CONFIG_DIR": str(tmp_path / "config"),
           "KVPILOT_DATA_DIR": str(tmp_path / "data"), "KVPILOT_SECRETS": "settings-file"}
    base = kvpilot_argv("chat", "--url", f"{keyed_server.base_url}/v1", "--api-key-env",
                        "CHAT_KEY", "--max-tokens", "6", "--temperature", "0")
    proc = subprocess.run([*base, "--json", "hello"], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert 1 <= doc["completion_tokens"] <= 6 and not doc["counted"] and doc["prompt_tokens"] > 0
    assert doc["ttft_s"] > 0 and isinstance(doc["text"], str)
    plain = subprocess.run([*base, "hello"], capture_output=True, text=True, env=env,
                           timeout=120, check=False)
    assert plain.returncode == 0 and "completion tokens" in plain.stderr
    env["CHAT_KEY"] = "wrong"
    refused = subprocess.run([*base, "--model", keyed_server.model_name, "hello"],
                             capture_output=True, text=True, env=env, timeout=120, check=False)
    assert refused.returncode == 1
    assert "refused the API key (401 Unauthorized)" in refused.stderr
    assert API_KEY not in refused.stderr + refused.stdout


def test_a_stopped_server_is_gone(keyed_server: Supervisor) -> None:
    """Last: stops the module's server."""
    target = _target(keyed_server)
    assert keyed_server.stop().clean
    with pytest.raises(ChatError) as caught:
        ChatCall(target, ChatSettings(max_tokens=4), _user("anyone?")).run()
    assert caught.value.kind == errors.KIND_GONE
    assert str(caught.value).startswith(f"The server at {keyed_server.base_url} is gone")
