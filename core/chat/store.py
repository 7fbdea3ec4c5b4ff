"""The conversation of each profile, kept in the data directory.

One JSON file per profile under ``<data dir>/chats/`` (the file name is the profile's name made
safe for any file system, plus a short hash so that two names never share a file), written
atomically (:func:`~kvpilot.core.base.paths.atomic_write_text`, mode 0600: messages may be private).
A file that cannot be read (bad JSON, a wrong shape) is set aside as ``<name>.damaged`` (nothing
is lost) and the profile starts a new conversation, with a warning to show; it never raises.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from kvpilot.core.base.conversation import ChatMessage, ChatSettings, Conversation
from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.paths import atomic_write_text, data_dir, write_failure

log = logging.getLogger("kvpilot.chat")

SCHEMA_VERSION = 1
FOLDER = "chats"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ChatStoreError(KvpilotError):
    """A conversation could not be written (the message says why; the old file is kept)."""


@dataclass(frozen=True)
class Loaded:
    """A profile's conversation as read, and the warning to show when its file was damaged."""

    conversation: Conversation
    warning: str | None = None


def file_name(profile: str) -> str:
    """The file name of ``profile``'s conversation (safe characters, a hash of the exact name)."""
    digest = hashlib.sha256(profile.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    stem = _UNSAFE.sub("_", profile).strip("._")[:60] or "profile"
    return f"{stem}-{digest}.json"


class ConversationStore:
    """Reads, writes and clears the conversations of profiles in ``folder`` (default
    ``<data dir>/chats``). Thread-safe: a write never interleaves with another."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = folder if folder is not None else data_dir() / FOLDER
        self._lock = threading.Lock()

    def path(self, profile: str) -> Path:
        """The file of ``profile``'s conversation."""
        return self.folder / file_name(profile)

    def load(self, profile: str) -> Loaded:
        """``profile``'s conversation (empty when it has none). Never raises: a damaged file is
        renamed ``….damaged`` and the warning says so."""
        path = self.path(profile)
        with self._lock:
            try:
                text = path.read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                return Loaded(Conversation())
            except (OSError, UnicodeDecodeError) as exc:
                return Loaded(Conversation(), self._set_aside(path, profile, str(exc)))
            try:
                return Loaded(parse(text))
            except (ValueError, TypeError, KeyError) as exc:
                return Loaded(Conversation(), self._set_aside(path, profile, str(exc)))

    def save(self, profile: str, conversation: Conversation) -> None:
        """Write ``profile``'s conversation atomically.

        Raises:
            ChatStoreError: the file cannot be written (full disk, permissions); the previous
                file is kept.
        """
        path = self.path(profile)
        text = dumps(profile, conversation)
        with self._lock:
            try:
                atomic_write_text(path, text)
            except OSError as exc:
                raise ChatStoreError(
                    write_failure(path, exc, len(text.encode()), env_var="KVPILOT_DATA_DIR")
                ) from exc

    def clear(self, profile: str, settings: ChatSettings | None = None) -> None:
        """Forget ``profile``'s messages; the chat settings stay when ``settings`` is given.

        Raises:
            ChatStoreError: the file cannot be removed or written.
        """
        if settings is not None and settings != ChatSettings():
            self.save(profile, Conversation(settings=settings))
            return
        path = self.path(profile)
        with self._lock:
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise ChatStoreError(
                    f"cannot remove {path}: {exc.strerror or exc}"
                ) from exc

    def _set_aside(self, path: Path, profile: str, reason: str) -> str:
        aside = path.with_name(path.name + ".damaged")
        try:
            path.replace(aside)
            kept = f"it was kept as {aside}"
        except OSError as exc:
            kept = f"it could not be set aside ({exc.strerror or exc})"
        message = (
            f"the saved chat of profile {profile!r} could not be read ({reason[:200]}); {kept} "
            "and a new conversation was started"
        )
        log.warning(message)
        return message


def dumps(profile: str, conversation: Conversation) -> str:
    """The JSON text of ``profile``'s conversation."""
    s = conversation.settings
    doc = {
        "version": SCHEMA_VERSION,
        "profile": profile,
        "settings": {
            "system_prompt": s.system_prompt,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
        },
        "messages": [m.to_dict() for m in conversation.messages],
    }
    return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"


def parse(text: str) -> Conversation:
    """The conversation of a file's text.

    Raises:
        ValueError, TypeError, KeyError: not JSON, a newer schema, or a wrong shape.
    """
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise TypeError("the file is not a JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"unknown version {version!r} (this kvpilot reads {SCHEMA_VERSION})")
    raw = doc.get("settings") or {}
    if not isinstance(raw, dict):
        raise TypeError("settings is not an object")
    settings = ChatSettings(
        system_prompt=str(raw.get("system_prompt", "")),
        temperature=float(raw.get("temperature", ChatSettings.temperature)),
        max_tokens=int(raw.get("max_tokens", ChatSettings.max_tokens)),
    ).checked()
    messages = doc.get("messages", [])
    if not isinstance(messages, list):
        raise TypeError("messages is not a list")
    return Conversation(settings, tuple(ChatMessage.from_dict(m) for m in messages))
