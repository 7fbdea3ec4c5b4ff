"""``kvpilot chat``: the reply streamed to stdout, its figures, the profile's key and kept
conversation, and the exit statuses; against a real local HTTP server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from chatkit import PostServer, json_reply, piece, sse_reply

from kvpilot.core.app import settings as st
from kvpilot.core.chat.store import ConversationStore
from kvpilot.core.cli import main
from kvpilot.core.commands.chat import profile_url

KEY = "profile-key-5"
USAGE = 'data: {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}}'


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PostServer]:
    """A server that streams "Hel" "lo"; the active profile points at it and has ``KEY``."""
    monkeypatch.setenv(st.CONFIG_DIR_ENV, str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    s = PostServer()
    s.handler = lambda h: sse_reply(h, [piece("Hel"), piece("lo", "stop"), USAGE, "data: [DONE]"])
    store = st.SettingsStore()
    settings = store.load().settings
    port = int(s.url.rsplit(":", 1)[1])
    store.save(st.update_profile(settings, replace(settings.active, port=port, api_key=KEY)))
    yield s
    s.close()


def test_the_reply_streams_to_stdout_and_its_figures_to_stderr(
    server: PostServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chat", "--max-tokens", "5", "--system", "terse", "hi"]) == 0
    out, err = capsys.readouterr()
    assert out == "Hello\n"
    assert "TTFT " in err and "11 prompt + 2 completion tokens" in err
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}"  # the profile's key
    body = server.bodies[0]
    assert body["model"] == "tiny-local"  # the first one /v1/models lists
    assert body["max_tokens"] == 5 and body["messages"][0] == {"role": "system", "content": "terse"}


def test_json_and_a_kept_conversation(
    server: PostServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["chat", "--url", f"{server.url}/v1/", "--model", "tiny", "--keep", "--json",
                 "one"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["text"] == "Hello" and doc["completion_tokens"] == 2 and doc["prompt_tokens"] == 11
    assert set(doc) == {"text", "ttft_s", "tokens_per_s", "prompt_tokens", "completion_tokens",
                        "duration_s", "counted", "stopped", "finish_reason"}
    assert main(["chat", "--model", "tiny", "--keep", "two"]) == 0
    sent = server.bodies[1]["messages"]
    assert [m["content"] for m in sent] == ["one", "Hello", "two"]
    kept = ConversationStore().load(st.SettingsStore().load().settings.active.name).conversation
    assert [m.text for m in kept.messages] == ["one", "Hello", "two", "Hello"]


def test_a_refused_key_is_one_sentence_and_status_1(
    server: PostServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.handler = lambda h: json_reply(h, 401, {"error": "Unauthorized"})
    monkeypatch.setenv("WRONG_KEY", "nope")
    assert main(["chat", "--model", "tiny", "--api-key-env", "WRONG_KEY", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused the API key (401 Unauthorized)" in err
    assert server.headers[0]["Authorization"] == "Bearer nope"


def test_user_errors_are_status_2(
    server: PostServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("words")
    assert main(["chat", "--model", "tiny", "--image", str(tmp_path / "notes.txt"), "hi"]) == 2
    assert "is not a PNG, JPEG" in capsys.readouterr().err
    assert main(["chat", "--profile", "nobody", "hi"]) == 2
    assert "no profile named 'nobody'" in capsys.readouterr().err
    assert main(["chat", "--api-key-env", "KVPILOT_NOT_SET_ANYWHERE", "hi"]) == 2
    assert main(["chat", "--url", "ftp://x", "hi"]) == 2
    assert "is not an http URL" in capsys.readouterr().err
    assert server.bodies == []  # nothing was sent


def test_a_wildcard_bind_is_reached_on_the_loopback_address() -> None:
    assert profile_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert profile_url("::1", 8000) == "http://[::1]:8000"
    assert profile_url("gpu-box", 9000) == "http://gpu-box:9000"
