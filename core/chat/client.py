"""One streamed chat reply from an OpenAI-compatible server, with its figures; stoppable.

:class:`ChatCall` posts the conversation to ``<server>/v1/chat/completions`` with
``"stream": true`` and ``"stream_options": {"include_usage": true}`` (and vLLM's
``continuous_usage_stats``, dropped for a server that refuses it), hands each new piece of
text to a callback as it arrives, and returns the reply with its :class:`ReplyStats`: time to
first text (TTFT, s), tokens per second, prompt and completion tokens (the server's usage; the
content chunks counted when it sends none). :meth:`ChatCall.stop` (from any thread) ends the
reply early: what arrived is kept and marked stopped.

Every failure is one :class:`~kvpilot.core.chat.errors.ChatError`. The API key goes only into
the ``Authorization`` header; it is never logged or put into a message.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from kvpilot.core.base.conversation import (
    ROLE_ASSISTANT,
    ChatMessage,
    ChatSettings,
    ReplyStats,
    request_messages,
)
from kvpilot.core.base.hosts import is_loopback_host, server_root
from kvpilot.core.chat import errors
from kvpilot.core.chat.errors import ChatError
from kvpilot.core.chat.sse import StreamParser

log = logging.getLogger("kvpilot.chat")

#: seconds to wait for a connection
CONNECT_TIMEOUT_S = 5.0
#: seconds without a byte from the server before the reply is given up (a long prompt's
#: prefill on a busy server comes first)
READ_TIMEOUT_S = 120.0
#: the shortest time from the first text to the last that gives a generation rate (s): text
#: that arrived in one burst (a client or server that lagged) says nothing about the speed
MIN_RATE_SPAN_S = 0.05
#: the most bytes of an error body read
_ERROR_BODY_BYTES = 16_384


@dataclass(frozen=True)
class ChatTarget:
    """The server to talk to: its root URL (``http://127.0.0.1:8000``; ``/v1`` is dropped), the
    served model name, the API key (None = none) and whether the model takes images."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    takes_images: bool = False

    @property
    def root(self) -> str:
        """``base_url`` as a server root.

        Raises:
            ValueError: not an http(s) URL.
        """
        return server_root(self.base_url)


@dataclass(frozen=True)
class Reply:
    """A finished (or stopped) reply: its text and figures."""

    text: str
    stats: ReplyStats

    def message(self) -> ChatMessage:
        """The reply as a conversation message."""
        return ChatMessage(role=ROLE_ASSISTANT, text=self.text, stats=self.stats)


def request_body(
    target: ChatTarget,
    settings: ChatSettings,
    history: tuple[ChatMessage, ...],
    *,
    continuous_usage: bool = True,
) -> dict[str, Any]:
    """The JSON body of a streamed chat completion of ``history`` (pure).

    ``continuous_usage`` asks vLLM for the token counts in every chunk
    (``continuous_usage_stats``), so that a stopped reply, or chunks vLLM merged while the
    client lagged, still have the server's counts; the usage chunk at the end comes either way.
    """
    s = settings.checked()
    options: dict[str, bool] = {"include_usage": True}
    if continuous_usage:
        options["continuous_usage_stats"] = True
    return {
        "model": target.model,
        "messages": request_messages(s, history),
        "temperature": s.temperature,
        "max_tokens": s.max_tokens,
        "stream": True,
        "stream_options": options,
    }


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


class ChatCall:
    """One reply to ``history`` (whose last message is the user's) from ``target``.

    Args:
        target: the server and model.
        settings: system prompt, temperature and max tokens.
        history: the conversation so far, oldest first.
        connect_timeout_s, read_timeout_s: seconds to wait for a connection, and for each next
            byte of the reply.
        transport: an httpx transport (tests); None for the network.

    :meth:`run` blocks (call it on a worker thread); :meth:`stop` may be called from any other.
    """

    def __init__(
        self,
        target: ChatTarget,
        settings: ChatSettings,
        history: tuple[ChatMessage, ...],
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.target = target
        self.settings = settings
        self.history = history
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._transport = transport
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._response: httpx.Response | None = None
        self._socket: socket.socket | None = None

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopped.is_set()

    def stop(self) -> None:
        """End the reply now (thread-safe): the stream is closed and :meth:`run` returns what
        arrived, marked stopped. Does nothing after the reply ended."""
        self._stopped.set()
        with self._lock:
            response, sock = self._response, self._socket
        if sock is not None:  # unblocks a read still waiting for the response's headers
            _shut(sock)
        if response is not None:
            try:
                response.close()
            except (httpx.HTTPError, OSError, RuntimeError):  # a close racing the reader
                log.debug("closing the stopped chat stream raised", exc_info=True)

    def run(self, on_text: Callable[[str], None] | None = None) -> Reply:
        """Send the request and read the stream to its end (or :meth:`stop`).

        ``on_text`` gets each new piece of the reply's text, on this thread.

        Returns:
            the reply, with ``stats.stopped`` when stopped.

        Raises:
            ChatError: the server refused or failed the request, is not there, sent nothing for
                ``read_timeout_s``, or sent something that is not an OpenAI stream.
        """
        try:
            root = self.target.root
        except ValueError as exc:
            raise ChatError(errors.KIND_REJECTED, f"{exc}.") from None
        try:
            return self._run(root, on_text, continuous_usage=True)
        except ChatError as exc:
            # a strict OpenAI-compatible server that does not know vLLM's extension
            if exc.kind != errors.KIND_REJECTED or "continuous_usage" not in exc.detail:
                raise
            return self._run(root, on_text, continuous_usage=False)

    def _run(
        self, root: str, on_text: Callable[[str], None] | None, *, continuous_usage: bool
    ) -> Reply:
        url = f"{root}/v1/chat/completions"
        body = request_body(
            self.target, self.settings, self.history, continuous_usage=continuous_usage
        )
        timeout = httpx.Timeout(self.read_timeout_s, connect=self.connect_timeout_s)
        start = time.monotonic()
        state = _Progress(start)
        try:
            with (
                httpx.Client(
                    timeout=timeout,
                    transport=self._transport,
                    trust_env=not is_loopback_host(httpx.URL(root).host),  # no proxy to localhost
                ) as client,
                client.stream(
                    "POST",
                    url,
                    json=body,
                    headers=_headers(self.target.api_key),
                    extensions={"trace": self._trace},
                ) as response,
            ):
                with self._lock:
                    self._response = response
                if self._stopped.is_set():
                    return state.reply(stopped=True)
                if response.status_code >= 400:
                    raise errors.from_status(response.status_code, _error_body(response), root)
                self._read(response, root, state, on_text)
        except ChatError:
            if self._stopped.is_set():
                return state.reply(stopped=True)
            raise
        except httpx.ConnectTimeout as exc:
            raise errors.gone(root, f"connect timeout: {exc}") from None
        except httpx.ConnectError as exc:
            raise errors.gone(root, f"connect: {exc}") from None
        except httpx.TimeoutException as exc:
            if self._stopped.is_set():
                return state.reply(stopped=True)
            raise errors.timed_out(root, self.read_timeout_s, str(exc)) from None
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            # closed by stop() from another thread, or the server dropped the connection
            if self._stopped.is_set():
                return state.reply(stopped=True)
            raise errors.gone(root, f"{type(exc).__name__}: {exc}", mid_reply=True) from None
        finally:
            with self._lock:
                self._response = None
                self._socket = None
        return state.reply(stopped=self._stopped.is_set())

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: keep the connection's socket, so that :meth:`stop` can shut
        it while the request still waits for the server's first byte."""
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._socket = sock
        if self._stopped.is_set():
            _shut(sock)

    def _read(
        self,
        response: httpx.Response,
        root: str,
        state: _Progress,
        on_text: Callable[[str], None] | None,
    ) -> None:
        parser = StreamParser(root)
        for line in response.iter_lines():
            if self._stopped.is_set():
                return
            delta = parser.feed(line)
            if delta is None:
                continue
            if delta.done:
                state.done = True
                return
            state.take(delta.text, delta.tokens, time.monotonic())
            if delta.finish_reason:
                state.finish_reason = delta.finish_reason
            if delta.prompt_tokens is not None:
                state.prompt_tokens = delta.prompt_tokens
            if delta.completion_tokens is not None:
                state.usage_completion = delta.completion_tokens
            if delta.text and on_text is not None:
                on_text(delta.text)
        if not state.done and state.finish_reason is None and not self._stopped.is_set():
            raise errors.gone(root, "the stream ended without [DONE]", mid_reply=True)


def _shut(sock: socket.socket) -> None:
    """Shut both directions of ``sock`` (the reader sees the end; the server sees the client
    go and stops generating); a socket already closed is left alone."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _error_body(response: httpx.Response) -> str:
    data = b""
    for chunk in response.iter_bytes():
        data += chunk
        if len(data) >= _ERROR_BODY_BYTES:
            break
    return data[:_ERROR_BODY_BYTES].decode("utf-8", "replace")


class _Progress:
    """What arrived so far and when (monotonic seconds)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.first: float | None = None
        self.last: float | None = None
        self.parts: list[str] = []
        self.chunks = 0
        self.prompt_tokens: int | None = None
        self.usage_completion: int | None = None
        self.finish_reason: str | None = None
        self.done = False

    def take(self, text: str, tokens: int, now: float) -> None:
        if text:
            self.parts.append(text)
            if self.first is None:
                self.first = now
            self.last = now
        self.chunks += tokens

    def reply(self, *, stopped: bool) -> Reply:
        end = time.monotonic()
        counted = self.usage_completion is None
        completion = self.chunks if counted else int(self.usage_completion or 0)
        rate = None
        if self.first is not None and self.last is not None and completion >= 2:
            span = self.last - self.first
            if span >= MIN_RATE_SPAN_S:
                rate = (completion - 1) / span
        stats = ReplyStats(
            ttft_s=None if self.first is None else self.first - self.start,
            duration_s=end - self.start,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=completion,
            tokens_per_s=rate,
            counted=counted,
            stopped=stopped,
            finish_reason=self.finish_reason,
        )
        return Reply(text="".join(self.parts), stats=stats)
