"""A conversation: its settings and its messages, each reply with its measured figures.

Plain frozen dataclasses with ``to_dict`` / ``from_dict`` (the JSON kept per profile by
:mod:`kvpilot.core.chat.store`) and :func:`request_messages`, the OpenAI ``messages`` list of a
conversation. Base vocabulary: the chat client and store, ``kvpilot chat`` and the window's chat
panel name them alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

ROLE_USER = "user"
ROLE_ASSISTANT = "assistant"
ROLES = (ROLE_USER, ROLE_ASSISTANT)

DEFAULT_TEMPERATURE = 0.7
DEFAULT_MAX_TOKENS = 256
MAX_TEMPERATURE = 2.0
#: the most output tokens one reply may ask (vLLM clamps to what the context leaves)
MAX_MAX_TOKENS = 1_000_000


@dataclass(frozen=True)
class ChatSettings:
    """How replies are asked for: the system prompt ("" = none), the sampling temperature
    (0 = greedy, at most :data:`MAX_TEMPERATURE`) and the most tokens one reply may have."""

    system_prompt: str = ""
    temperature: float = DEFAULT_TEMPERATURE
    max_tokens: int = DEFAULT_MAX_TOKENS

    def checked(self) -> ChatSettings:
        """These settings with temperature and max tokens clamped into their ranges."""
        temp = min(max(float(self.temperature), 0.0), MAX_TEMPERATURE)
        tokens = min(max(int(self.max_tokens), 1), MAX_MAX_TOKENS)
        return replace(self, temperature=temp, max_tokens=tokens)


@dataclass(frozen=True)
class ReplyStats:
    """The figures of one reply.

    Attributes:
        ttft_s: seconds from sending the request to the first text (None when none came).
        duration_s: seconds from sending to the end of the stream (or the stop).
        prompt_tokens: the prompt's tokens, from the server's usage (None without usage).
        completion_tokens: the reply's tokens: the server's usage, else the content chunks
            counted (``counted`` True).
        tokens_per_s: generation speed: the completion tokens after the first, divided by the
            seconds from the first text to the last, as this client saw them (None with fewer
            than two tokens, or when all the text came in one burst).
        counted: the completion count is the chunks counted (the server sent no usage).
        stopped: the user stopped the reply before it ended.
        finish_reason: ``stop`` (the model ended), ``length`` (max tokens reached), … or None.
    """

    ttft_s: float | None
    duration_s: float
    prompt_tokens: int | None
    completion_tokens: int
    tokens_per_s: float | None
    counted: bool = False
    stopped: bool = False
    finish_reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttft_s": self.ttft_s,
            "duration_s": self.duration_s,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "tokens_per_s": self.tokens_per_s,
            "counted": self.counted,
            "stopped": self.stopped,
            "finish_reason": self.finish_reason,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplyStats:
        """Raises: KeyError, TypeError, ValueError on a malformed object."""
        return cls(
            ttft_s=_opt_float(d.get("ttft_s")),
            duration_s=float(d["duration_s"]),
            prompt_tokens=_opt_int(d.get("prompt_tokens")),
            completion_tokens=int(d["completion_tokens"]),
            tokens_per_s=_opt_float(d.get("tokens_per_s")),
            counted=bool(d.get("counted", False)),
            stopped=bool(d.get("stopped", False)),
            finish_reason=d.get("finish_reason") if isinstance(d.get("finish_reason"), str)
            else None,
        )


def _seconds(value: float | None) -> str:
    if value is None:
        return "–"
    if value < 0.01:
        return f"{value * 1000:.1f} ms"
    if value < 1.0:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s"


def stats_text(stats: ReplyStats) -> str:
    """The figures of a reply on one line, as the Chat tab and ``kvpilot chat`` show them:
    ``"TTFT 212 ms · 35 tokens/s · 42 prompt + 24 completion tokens"`` and how it ended."""
    rate = f"{stats.tokens_per_s:,.0f}" if stats.tokens_per_s else "–"
    prompt = "–" if stats.prompt_tokens is None else f"{stats.prompt_tokens:,}"
    counted = " (counted)" if stats.counted else ""
    parts = [
        f"TTFT {_seconds(stats.ttft_s)}",
        f"{rate} tokens/s",
        f"{prompt} prompt + {stats.completion_tokens:,} completion tokens{counted}",
    ]
    if stats.stopped:
        parts.append("stopped")
    elif stats.finish_reason == "length":
        parts.append("max tokens reached")
    return " · ".join(parts)


@dataclass(frozen=True)
class ChatMessage:
    """One turn: the user's text (and image) or the model's reply (or why it failed).

    Attributes:
        role: ``user`` or ``assistant``.
        text: the message text (a failed reply keeps what arrived before the failure).
        image_url: a ``data:`` URL of an image sent with a user message, else None.
        stats: a reply's figures (None for user messages and failed replies).
        error: the one sentence of a failed reply (:class:`~kvpilot.core.chat.errors.ChatError`),
            else None; failed replies are not sent back to the model.
    """

    role: str
    text: str
    image_url: str | None = field(default=None, repr=False)
    stats: ReplyStats | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.image_url:
            d["image_url"] = self.image_url
        if self.stats is not None:
            d["stats"] = self.stats.to_dict()
        if self.error:
            d["error"] = self.error
        return d

    @classmethod
    def from_dict(cls, d: object) -> ChatMessage:
        """Raises: KeyError, TypeError, ValueError on a malformed object."""
        if not isinstance(d, dict):
            raise TypeError("a message is not an object")
        role, text = d["role"], d["text"]
        if role not in ROLES or not isinstance(text, str):
            raise ValueError(f"a message with role {role!r} and text of {type(text).__name__}")
        image = d.get("image_url")
        stats = d.get("stats")
        error = d.get("error")
        return cls(
            role=role,
            text=text,
            image_url=image if isinstance(image, str) and image.startswith("data:") else None,
            stats=ReplyStats.from_dict(stats) if isinstance(stats, dict) else None,
            error=error if isinstance(error, str) else None,
        )


@dataclass(frozen=True)
class Conversation:
    """The settings and messages of one profile's chat, oldest message first."""

    settings: ChatSettings = ChatSettings()
    messages: tuple[ChatMessage, ...] = ()

    def add(self, message: ChatMessage) -> Conversation:
        return replace(self, messages=(*self.messages, message))

    def cleared(self) -> Conversation:
        """No messages; the settings stay."""
        return replace(self, messages=())


def request_messages(settings: ChatSettings, history: tuple[ChatMessage, ...]) -> list[Any]:
    """The OpenAI ``messages`` of ``history`` after the system prompt (when there is one).

    Failed and empty replies are left out (the model never said them), and so is the user
    message a failed reply answered (a message too long for the context would fail every later
    turn); a user message with an image becomes a text part and an ``image_url`` part.
    """
    out: list[Any] = []
    if settings.system_prompt.strip():
        out.append({"role": "system", "content": settings.system_prompt})
    for i, m in enumerate(history):
        if m.role == ROLE_ASSISTANT and (m.error or not m.text):
            continue
        after = history[i + 1] if i + 1 < len(history) else None
        if m.role == ROLE_USER and after is not None and after.error:
            continue
        if m.image_url:
            content: Any = [
                {"type": "text", "text": m.text},
                {"type": "image_url", "image_url": {"url": m.image_url}},
            ]
        else:
            content = m.text
        out.append({"role": m.role, "content": content})
    return out


def _opt_float(v: object) -> float | None:
    if v is None:
        return None
    if not isinstance(v, (int, float, str)):
        raise TypeError(f"a number was expected, not {type(v).__name__}")
    return float(v)


def _opt_int(v: object) -> int | None:
    if v is None:
        return None
    if not isinstance(v, (int, float, str)):
        raise TypeError(f"a whole number was expected, not {type(v).__name__}")
    return int(v)
