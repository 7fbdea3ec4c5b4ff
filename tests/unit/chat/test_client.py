"""The chat client against real local HTTP servers that misbehave the ways servers do: a
timeout, garbage, a dropped connection, a 500, a 404, no usage chunk; and the error sentences of
vLLM's own error bodies."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from chatkit import PostServer, json_reply, piece, sse_reply

from kvpilot.core.base.conversation import ChatMessage, ChatSettings
from kvpilot.core.chat import errors
from kvpilot.core.chat.client import ChatCall, ChatTarget, request_body
from kvpilot.core.chat.errors import ChatError

HISTORY = (ChatMessage("user", "hi"),)


@pytest.fixture
def server() -> Iterator[PostServer]:
    s = PostServer()
    yield s
    s.close()


def _target(url: str, key: str | None = "secret-key-9") -> ChatTarget:
    return ChatTarget(base_url=url + "/v1/", model="tiny", api_key=key)


def test_the_request_is_a_streamed_chat_completion_with_usage(server: PostServer) -> None:
    server.handler = lambda h: sse_reply(h, [
        piece("a"), piece("b"), piece("c", "stop"),
        'data: {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}',
        "data: [DONE]",
    ], pause_s=0.05)
    settings = ChatSettings(system_prompt="sys", temperature=0.3, max_tokens=7)
    pieces: list[str] = []
    reply = ChatCall(_target(server.url), settings, HISTORY).run(pieces.append)
    assert pieces == ["a", "b", "c"] and reply.text == "abc"
    body = server.bodies[0]
    assert body == request_body(_target(server.url), settings, HISTORY)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["messages"] == [{"role": "system", "content": "sys"},
                                {"role": "user", "content": "hi"}]
    assert (body["temperature"], body["max_tokens"], body["model"]) == (0.3, 7, "tiny")
    assert server.headers[0]["Authorization"] == "Bearer secret-key-9"
    s = reply.stats
    assert (s.prompt_tokens, s.completion_tokens, s.counted) == (9, 3, False)
    assert s.finish_reason == "stop"
    assert s.ttft_s is not None and 0 < s.ttft_s < s.duration_s
    # two tokens after the first, each after a 0.05 s pause: under 2 / 0.09 tokens/s; the lower
    # bound leaves a busy machine two seconds
    assert s.tokens_per_s is not None and 2 / 2.0 < s.tokens_per_s < 2 / 0.09


def test_a_server_that_refuses_vllms_usage_option_is_asked_again_without(
    server: PostServer,
) -> None:
    def handler(h: http.server.BaseHTTPRequestHandler) -> None:
        if server.bodies[-1]["stream_options"] == {"include_usage": True}:
            sse_reply(h, [piece("ok", "stop"), "data: [DONE]"])
        else:
            json_reply(h, 400, {"error": {"message": "Unrecognized request argument supplied: "
                                     "stream_options.continuous_usage_stats"}})

    server.handler = handler
    reply = ChatCall(_target(server.url), ChatSettings(), HISTORY).run()
    assert reply.text == "ok" and len(server.bodies) == 2


def test_text_in_one_burst_gives_no_rate(server: PostServer) -> None:
    server.handler = lambda h: sse_reply(h, [piece("a"), piece("b"), piece("c", "stop"),
                                           "data: [DONE]"])
    s = ChatCall(_target(server.url), ChatSettings(), HISTORY).run().stats
    assert s.completion_tokens == 3 and s.tokens_per_s is None


def test_without_usage_the_pieces_are_counted(server: PostServer) -> None:
    server.handler = lambda h: sse_reply(h, [piece("x"), piece("y", "stop"), "data: [DONE]"])
    s = ChatCall(_target(server.url, None), ChatSettings(), HISTORY).run().stats
    assert (s.completion_tokens, s.counted, s.prompt_tokens) == (2, True, None)
    assert "Authorization" not in server.headers[0]


def test_nothing_for_the_read_timeout_is_the_timeout_sentence(server: PostServer) -> None:
    release = threading.Event()
    server.handler = lambda _h: release.wait(5)
    try:
        with pytest.raises(ChatError) as caught:
            ChatCall(_target(server.url), ChatSettings(), HISTORY, read_timeout_s=0.3).run()
    finally:
        release.set()
    assert caught.value.kind == errors.KIND_TIMEOUT
    assert str(caught.value).startswith(f"The server at {server.url} sent nothing for 0.3 s")


def test_garbage_in_the_stream_is_the_garbage_sentence(server: PostServer) -> None:
    server.handler = lambda h: sse_reply(h, [piece("ok"), "<html>oops</html>"])
    with pytest.raises(ChatError) as caught:
        ChatCall(_target(server.url), ChatSettings(), HISTORY).run()
    assert caught.value.kind == errors.KIND_GARBAGE


def test_a_connection_dropped_mid_reply_is_gone(server: PostServer) -> None:
    server.handler = lambda h: sse_reply(h, [piece("half")], close_early=True)
    with pytest.raises(ChatError) as caught:
        ChatCall(_target(server.url), ChatSettings(), HISTORY).run()
    assert caught.value.kind == errors.KIND_GONE
    assert "in the middle of the reply" in str(caught.value)


def test_nothing_listening_is_gone() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ChatError) as caught:
        ChatCall(_target(f"http://127.0.0.1:{port}"), ChatSettings(), HISTORY).run()
    assert caught.value.kind == errors.KIND_GONE
    assert str(caught.value) == (
        f"The server at http://127.0.0.1:{port} is gone (nothing accepts connections there): "
        "start it again or attach to a running one."
    )


@pytest.mark.parametrize(
    ("status", "doc", "kind", "sentence"),
    [
        (401, {"error": "Unauthorized"}, errors.KIND_AUTH,
         "refused the API key (401 Unauthorized)"),
        (404, {"error": {"message": "The model `tiny` does not exist.", "type": "NotFoundError",
                         "param": "model", "code": 404}},
         errors.KIND_REJECTED, "(HTTP 404: The model `tiny` does not exist)."),
        (500, {"detail": "boom"}, errors.KIND_SERVER, "failed to answer (HTTP 500: boom)."),
        (400, {"error": {"message": "This model's maximum context length is 1024 tokens. However, "
                         "your prompt contains 1300 input tokens, which exceeds this limit even "
                         "without any output tokens. Please reduce the length of the input "
                         "prompt.", "type": "BadRequestError", "param": "input_tokens",
                         "code": 400}},
         errors.KIND_CONTEXT, "context (1,024 tokens and the conversation has 1,300)"),
    ],
)
def test_error_responses_are_one_sentence(
    server: PostServer, status: int, doc: object, kind: str, sentence: str
) -> None:
    server.handler = lambda h: json_reply(h, status, doc)
    with pytest.raises(ChatError) as caught:
        ChatCall(_target(server.url), ChatSettings(), HISTORY).run()
    err = caught.value
    assert (err.kind, err.status_code) == (kind, status)
    assert sentence in str(err) and str(err).endswith(".") and "\n" not in str(err)
    assert "secret-key-9" not in str(err) + err.detail


def test_stop_while_waiting_for_the_firstpiece(server: PostServer) -> None:
    release = threading.Event()
    server.handler = lambda h: (release.wait(5), sse_reply(h, [piece("late")]))
    call = ChatCall(_target(server.url), ChatSettings(), HISTORY)
    timer = threading.Timer(0.3, call.stop)
    timer.start()
    t0 = time.monotonic()
    try:
        reply = call.run()
    finally:
        release.set()
        timer.join()
    assert time.monotonic() - t0 < 3
    assert reply.stats.stopped and reply.text == "" and reply.stats.ttft_s is None


def test_a_proxy_in_the_environment_is_not_used_for_this_machine(
    server: PostServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    server.handler = lambda h: sse_reply(h, [piece("ok", "stop"), "data: [DONE]"])
    assert ChatCall(_target(server.url), ChatSettings(), HISTORY).run().text == "ok"
