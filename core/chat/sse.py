"""The server-sent events of a streamed chat completion, one line at a time.

vLLM (and every OpenAI-compatible server) answers ``"stream": true`` with ``data: <json>`` lines
separated by blank lines, ends with ``data: [DONE]``, and with
``"stream_options": {"include_usage": true}`` sends a last chunk whose ``usage`` holds the
prompt and completion token counts. An error after the stream began arrives as
``data: {"error": {...}}``.

:class:`StreamParser` turns lines into :class:`Delta` events; comments (``:``), ``event:``,
``id:`` and ``retry:`` fields and blank lines are skipped. Anything else (a line that is not an
SSE field, a ``data:`` payload that is not a JSON object, a chunk with neither ``choices``,
``usage`` nor ``error``) is garbage and raises :class:`~kvpilot.core.chat.errors.ChatError`
of kind ``garbage``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvpilot.core.chat import errors

#: the longest line quoted in an error detail (characters)
_SHOWN = 120


@dataclass(frozen=True)
class Delta:
    """What one ``data:`` line carried.

    Attributes:
        text: new reply text ("" when the chunk had none).
        tokens: content chunks in this line (vLLM streams one token or a few per chunk; the
            count is the fallback when the server sends no usage).
        finish_reason: ``stop`` / ``length`` / … when the choice ended here, else None.
        prompt_tokens: from the usage chunk, else None.
        completion_tokens: from the usage chunk, else None.
        done: the ``[DONE]`` sentinel.
    """

    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    done: bool = False


_SKIPPED_FIELDS = ("event:", "id:", "retry:")


class StreamParser:
    """Parses the decoded lines of one streamed reply from ``url`` (for messages only)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def feed(self, line: str) -> Delta | None:
        """The event of ``line`` (one line without its end), or None for a line that carries
        nothing (blank, comment, other SSE fields).

        Raises:
            ChatError: kind ``garbage`` for a line that is not an OpenAI stream line; the
                server's message (kind ``server`` or ``context``) for an error event.
        """
        line = line.rstrip("\r")
        if not line.strip() or line.startswith(":") or line.startswith(_SKIPPED_FIELDS):
            return None
        if not line.startswith("data:"):
            raise errors.garbage(self.url, f"not a server-sent event line: {line[:_SHOWN]!r}")
        payload = line[5:].strip()
        if payload == "[DONE]":
            return Delta(done=True)
        try:
            obj = json.loads(payload)
        except ValueError as exc:
            raise errors.garbage(
                self.url, f"data is not JSON ({exc}): {payload[:_SHOWN]!r}"
            ) from None
        if not isinstance(obj, dict):
            raise errors.garbage(self.url, f"data is not a JSON object: {payload[:_SHOWN]!r}")
        return self._chunk(obj, payload)

    def _chunk(self, obj: dict[str, Any], payload: str) -> Delta:
        if "error" in obj:
            raise errors.stream_error(errors.server_message(payload))
        choices = obj.get("choices")
        usage = obj.get("usage")
        if not isinstance(choices, list):
            if choices is not None or not isinstance(usage, dict):
                raise errors.garbage(
                    self.url, f"a chunk without choices or usage: {payload[:_SHOWN]!r}"
                )
            choices = []
        text_parts: list[str] = []
        tokens = 0
        finish: str | None = None
        for choice in choices:
            if not isinstance(choice, dict):
                raise errors.garbage(self.url, f"a choice is not an object: {payload[:_SHOWN]!r}")
            delta = choice.get("delta") or {}
            content = delta.get("content") if isinstance(delta, dict) else None
            if content is None:
                content = choice.get("text")  # completions-style chunks
            if isinstance(content, str) and content:
                text_parts.append(content)
                tokens += 1
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                finish = reason
        prompt = completion = None
        if isinstance(usage, dict):
            prompt = _count(usage.get("prompt_tokens"))
            completion = _count(usage.get("completion_tokens"))
        return Delta(
            text="".join(text_parts),
            tokens=tokens,
            finish_reason=finish,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
