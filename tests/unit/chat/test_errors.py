"""The error sentences: vLLM's error bodies and refusals read as one sentence each."""

from __future__ import annotations

import json

from kvpilot.core.chat import errors

URL = "http://127.0.0.1:8000"


def test_the_servers_message_is_found_in_each_body_shape() -> None:
    assert errors.server_message(json.dumps({"error": {"message": "m1", "code": 400}})) == "m1"
    assert errors.server_message(json.dumps({"error": "Unauthorized"})) == "Unauthorized"
    assert errors.server_message(json.dumps({"detail": "Not Found"})) == "Not Found"
    assert errors.server_message(json.dumps({"message": "m2"})) == "m2"
    assert errors.server_message("<html>Bad Gateway</html>") == "<html>Bad Gateway</html>"
    assert errors.server_message(json.dumps([1])) == "[1]"


def test_both_context_refusals_of_vllm_032_are_the_context_sentence() -> None:
    tokens = (
        "This model's maximum context length is 1024 tokens. However, your prompt contains at "
        "least 1025 input tokens, which exceeds this limit even without any output tokens. "
        "Please reduce the length of the input prompt."
    )
    chars = (
        "This model's maximum context length is 32768 tokens. However, your prompt contains "
        "500000 characters (more than 393216 characters, which is the upper bound for 32768 "
        "input tokens). Please reduce the length of the input prompt."
    )
    a = errors.from_status(400, json.dumps({"error": {"message": tokens}}), URL)
    b = errors.from_status(400, json.dumps({"error": {"message": chars}}), URL)
    assert a.kind == b.kind == errors.KIND_CONTEXT
    assert str(a) == (
        "The conversation is too long for the model's context (1,024 tokens and the "
        "conversation has 1,025): clear the conversation or send a shorter message."
    )
    assert str(b).startswith("The conversation is too long for the model's context (32,768 tokens)")
    assert a.detail == tokens


def test_other_statuses() -> None:
    forbidden = errors.from_status(403, "", URL)
    assert forbidden.kind == errors.KIND_AUTH and "403 Forbidden" in str(forbidden)
    long_reason = "why " * 200
    rejected = errors.from_status(422, json.dumps({"detail": long_reason}), URL)
    assert rejected.kind == errors.KIND_REJECTED and len(str(rejected)) < 320
    assert str(rejected).endswith("why…).")
    assert str(errors.from_status(502, "", URL)) == (
        "The server failed to answer (HTTP 502: no reason)."
    )


def test_quote_is_one_line_without_a_closing_stop() -> None:
    assert errors.quote("a\nb.  ") == "a b"
    assert len(errors.quote("x" * 1000, 50)) == 50
