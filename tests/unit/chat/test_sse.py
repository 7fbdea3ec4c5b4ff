"""The stream parser on real vLLM chunk shapes and on garbage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.core.chat import errors
from kvpilot.core.chat.errors import ChatError
from kvpilot.core.chat.sse import Delta, StreamParser

URL = "http://127.0.0.1:8000"


def _chunk(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    return "data: " + json.dumps({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    })


def test_a_vllm_stream_parses_into_text_finish_usage_and_done() -> None:
    lines = [
        "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}),
        "",
        _chunk("Hel"),
        "",
        ": keep-alive comment",
        _chunk("lo"),
        _chunk(None, "length"),
        "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [],
                               "usage": {"prompt_tokens": 17, "total_tokens": 19,
                                         "completion_tokens": 2}}),
        "data: [DONE]",
    ]
    p = StreamParser(URL)
    got = [d for d in (p.feed(line) for line in lines) if d is not None]
    assert "".join(d.text for d in got) == "Hello"
    assert sum(d.tokens for d in got) == 2
    assert [d.finish_reason for d in got if d.finish_reason] == ["length"]
    usage = [d for d in got if d.completion_tokens is not None]
    assert usage == [Delta(prompt_tokens=17, completion_tokens=2)]
    assert got[-1].done


@pytest.mark.parametrize(
    "line",
    [
        "<html><body>502 Bad Gateway</body></html>",
        "data: {\"choices\": [",
        "data: 42",
        "data: [\"a\"]",
        "data: {\"hello\": \"world\"}",
        "data: {\"choices\": \"many\"}",
        "data: {\"choices\": [7]}",
        "data: \x00\x01\x02",
    ],
)
def test_garbage_is_one_chat_error(line: str) -> None:
    with pytest.raises(ChatError) as caught:
        StreamParser(URL).feed(line)
    err = caught.value
    assert err.kind == errors.KIND_GARBAGE
    assert str(err) == (
        f"The reply from {URL} could not be read (not an OpenAI chat stream): is it a vLLM or "
        "other OpenAI-compatible server?"
    )
    assert err.detail  # what was wrong, for the log


def test_other_sse_fields_are_skipped() -> None:
    p = StreamParser(URL)
    assert [p.feed(x) for x in ("event: message", "id: 3", "retry: 100", "   ", "\r")] == [None] * 5


def test_an_error_event_in_the_stream_is_the_servers_sentence() -> None:
    line = "data: " + json.dumps(
        {"error": {"message": "EngineCore encountered an issue.", "type": "InternalServerError",
                   "param": None, "code": 500}}
    )
    with pytest.raises(ChatError) as caught:
        StreamParser(URL).feed(line)
    assert caught.value.kind == errors.KIND_SERVER
    assert str(caught.value) == (
        "The server stopped the reply with an error: EngineCore encountered an issue."
    )


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["choices", "usage", "delta", "content", "error",
                                       "finish_reason", "prompt_tokens", "completion_tokens",
                                       "text", "message"]) | st.text(max_size=5),
                      inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=80), _JSON.map(lambda v: "data: " + json.dumps(v))))
def test_any_line_is_a_delta_nothing_or_one_chat_error(line: str) -> None:
    try:
        got = StreamParser(URL).feed(line)
    except ChatError as err:
        assert err.kind in (errors.KIND_GARBAGE, errors.KIND_SERVER, errors.KIND_CONTEXT)
        assert str(err)[-1] in ".?" and "\n" not in str(err)
        return
    assert got is None or isinstance(got, Delta)
