"""The one error of a chat reply: what went wrong, in one sentence the user can act on.

Every failure of a chat request (the server's own error responses, a refused connection, a
timeout, a stream that cannot be read) becomes a :class:`ChatError` whose ``kind`` is one of the
``KIND_*`` constants and whose message is one sentence; ``detail`` keeps the server's own text
(never an API key) for the log.
"""

from __future__ import annotations

import json
import re

from kvpilot.core.base.errors import KvpilotError

KIND_CONTEXT = "context"  # the prompt does not fit the model's context length
KIND_AUTH = "auth"  # 401: the API key is missing or wrong
KIND_GONE = "gone"  # connection refused or dropped: the server is not there (any more)
KIND_TIMEOUT = "timeout"  # nothing arrived within the read timeout
KIND_GARBAGE = "garbage"  # the reply is not an OpenAI stream of JSON events
KIND_REJECTED = "rejected"  # another 4xx: the server refused the request (its reason given)
KIND_SERVER = "server"  # a 5xx or an error event inside the stream
KIND_IMAGE = "image"  # an attached image that cannot be sent
KIND_NO_SERVER = "no-server"  # nothing to talk to yet

#: the longest server message quoted in a sentence (characters)
QUOTE_CHARS = 240

_CONTEXT_RE = re.compile(r"maximum context length is (\d+) tokens", re.IGNORECASE)
_PROMPT_TOKENS_RE = re.compile(r"contains (?:at least )?(\d+) input tokens", re.IGNORECASE)


class ChatError(KvpilotError):
    """A chat reply that failed; ``str(err)`` is one sentence for the conversation.

    Attributes:
        kind: one of the ``KIND_*`` constants.
        detail: the server's own message or the transport error (may be empty).
        status_code: the HTTP status when the server answered with one, else None.
    """

    def __init__(
        self, kind: str, message: str, *, detail: str = "", status_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail
        self.status_code = status_code


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` on one line without a closing full stop, cut to ``limit`` characters (with an
    ellipsis), to end a sentence of its own."""
    one = " ".join(text.split()).rstrip(". ")
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"


def server_message(body: str) -> str:
    """The message of an error body: OpenAI's ``{"error": {"message": …}}``, vLLM's
    ``{"error": "Unauthorized"}``, FastAPI's ``{"detail": …}``, a ``{"message": …}``, or the
    text itself."""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()
    if isinstance(doc, dict):
        err = doc.get("error", doc)
        if isinstance(err, dict):
            for key in ("message", "detail"):
                if isinstance(err.get(key), str):
                    return str(err[key])
        elif isinstance(err, str):
            return err
        if isinstance(doc.get("detail"), str):
            return str(doc["detail"])
    return body.strip()


def context_error(message: str, status_code: int | None = None) -> ChatError | None:
    """The context-too-long error when ``message`` is vLLM's "maximum context length" refusal,
    else None."""
    m = _CONTEXT_RE.search(message)
    if m is None:
        return None
    limit = int(m.group(1))
    p = _PROMPT_TOKENS_RE.search(message)
    has = f" and the conversation has {int(p.group(1)):,}" if p else ""
    return ChatError(
        KIND_CONTEXT,
        f"The conversation is too long for the model's context ({limit:,} tokens{has}): clear "
        "the conversation or send a shorter message.",
        detail=message,
        status_code=status_code,
    )


def from_status(status_code: int, body: str, url: str) -> ChatError:
    """The error of an HTTP error response (``status_code`` >= 400) from ``url``."""
    message = server_message(body)
    ctx = context_error(message, status_code)
    if ctx is not None:
        return ctx
    if status_code == 401:
        return ChatError(
            KIND_AUTH,
            f"The server at {url} refused the API key (401 Unauthorized): set the key it was "
            "started with (--api-key) in the profile's settings, or when attaching.",
            detail=message,
            status_code=status_code,
        )
    if status_code == 403:
        return ChatError(
            KIND_AUTH,
            f"The server at {url} does not allow this request (403 Forbidden): check the API key.",
            detail=message,
            status_code=status_code,
        )
    if status_code >= 500:
        return ChatError(
            KIND_SERVER,
            f"The server failed to answer (HTTP {status_code}: {quote(message) or 'no reason'}).",
            detail=message,
            status_code=status_code,
        )
    return ChatError(
        KIND_REJECTED,
        f"The server refused the request (HTTP {status_code}: {quote(message) or 'no reason'}).",
        detail=message,
        status_code=status_code,
    )


def gone(url: str, detail: str, *, mid_reply: bool = False) -> ChatError:
    """The server is not there: the connection was refused (or dropped ``mid_reply``)."""
    if mid_reply:
        text = (
            f"The server at {url} is gone: it closed the connection in the middle of the reply "
            "(stopped or crashed?)."
        )
    else:
        text = (
            f"The server at {url} is gone (nothing accepts connections there): start it again "
            "or attach to a running one."
        )
    return ChatError(KIND_GONE, text, detail=detail)


def timed_out(url: str, timeout_s: float, detail: str = "") -> ChatError:
    """Nothing arrived from ``url`` for ``timeout_s`` seconds."""
    return ChatError(
        KIND_TIMEOUT,
        f"The server at {url} sent nothing for {timeout_s:g} s: it may be overloaded or stuck; "
        "try again, or lower max tokens.",
        detail=detail,
    )


def garbage(url: str, detail: str) -> ChatError:
    """The reply could not be read as an OpenAI stream."""
    return ChatError(
        KIND_GARBAGE,
        f"The reply from {url} could not be read (not an OpenAI chat stream): is it a vLLM or "
        "other OpenAI-compatible server?",
        detail=detail,
    )


def stream_error(message: str) -> ChatError:
    """An error event the server sent inside the stream."""
    ctx = context_error(message)
    if ctx is not None:
        return ctx
    return ChatError(
        KIND_SERVER,
        f"The server stopped the reply with an error: {quote(message) or 'no reason given'}.",
        detail=message,
    )
