"""``kvpilot chat MESSAGE``: one streamed reply from a running server, as the Chat tab gets it.

The server is ``--url``, else the profile's host and port (``--profile``, else the active one);
the API key is ``--api-key-env``'s variable, else the profile's (from the keyring, through the
settings store). The reply streams to stdout as it arrives; its figures (TTFT, tokens/s, prompt
and completion tokens) follow on stderr. ``--keep`` sends the profile's kept conversation with
the message and adds both to it (the one the Chat tab shows); ``--json`` prints one JSON
document (``text`` and the figures) instead. Ctrl+C stops the reply and keeps what arrived.

Exit status: 0 when a reply came, 1 when the server refused or failed it (one sentence on
stderr), 2 for user errors (no such profile, an unreadable image, no model to talk to).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.commands import Subparsers

#: the JSON keys of ``--json`` (beside ``text``): the reply's figures
FIGURE_KEYS = (
    "ttft_s", "tokens_per_s", "prompt_tokens", "completion_tokens", "duration_s", "counted",
    "stopped", "finish_reason",
)


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``chat`` on the top-level parser."""
    from kvpilot.core.base.conversation import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE
    from kvpilot.core.base.hosts import URL_HELP

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "chat",
        help="send one message to a running server and stream the reply",
        description="Send MESSAGE to the server's chat-completions API and stream the reply, "
        "with its time to first token, tokens/s and token counts.",
    )
    parser.add_argument("message", help="the message to send")
    parser.add_argument(
        "--url", help=f"the server (default: the profile's host and port); {URL_HELP}"
    )
    parser.add_argument("--profile", metavar="NAME", help="the profile (default: the active one)")
    parser.add_argument("--model", help="model name (default: the first one in /v1/models)")
    parser.add_argument(
        "--api-key-env", metavar="VAR", help="read the API key from this environment variable "
        "(default: the profile's key)"
    )
    parser.add_argument("--system", default="", metavar="TEXT", help="system prompt")
    parser.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE, metavar="T",
                        help="sampling temperature, 0-2 (default %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N",
                        help="the most tokens of the reply (default %(default)s)")
    parser.add_argument("--image", metavar="PATH", help="send an image with the message "
                        "(vision models)")
    parser.add_argument("--keep", action="store_true", help="continue the profile's kept "
                        "conversation (the Chat tab's) and add this turn to it")
    parser.add_argument("--json", action="store_true", help="print the reply as JSON")
    return parser


def profile_url(host: str, port: int) -> str:
    """The URL a client uses for a server bound to ``host``:``port`` (a wildcard bind is
    reached on the loopback address)."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def run(args: argparse.Namespace) -> int:
    """Send the message; 0, 1 or 2 (see the module docstring)."""
    from kvpilot.core.chat.errors import KIND_IMAGE, ChatError

    try:
        return _run(args)
    except ChatError as exc:
        print(f"kvpilot: {exc}", file=sys.stderr)
        return 2 if exc.kind == KIND_IMAGE else 1
    except KvpilotError as exc:
        print(f"kvpilot: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from kvpilot.core.app import settings as st
    from kvpilot.core.base.conversation import (
        ROLE_USER,
        ChatMessage,
        ChatSettings,
        Conversation,
        stats_text,
    )
    from kvpilot.core.base.hosts import server_root
    from kvpilot.core.chat.client import ChatCall, ChatTarget, Reply
    from kvpilot.core.chat.images import image_data_url
    from kvpilot.core.chat.store import ConversationStore
    from kvpilot.core.vllm.client import detect_model

    loaded = st.SettingsStore().load().settings
    profile = loaded.profile(args.profile) if args.profile else loaded.active
    try:
        url = server_root(args.url or profile_url(profile.host, profile.port))
    except ValueError as exc:
        raise KvpilotError(str(exc)) from None
    api_key = profile.api_key or None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env) or None
        if api_key is None:
            raise KvpilotError(
                f"environment variable {args.api_key_env} is not set; export the API key there"
            )
    model = args.model or detect_model(url, api_key=api_key)
    image = image_data_url(Path(args.image)) if args.image else None
    settings = ChatSettings(args.system, args.temperature, args.max_tokens).checked()
    store = ConversationStore()
    conversation = store.load(profile.name).conversation if args.keep else Conversation()
    conversation = replace(conversation, settings=settings).add(
        ChatMessage(ROLE_USER, args.message, image_url=image)
    )
    call = ChatCall(ChatTarget(url, model, api_key), settings, conversation.messages)

    def show(piece: str) -> None:
        if not args.json:
            sys.stdout.write(piece)
            sys.stdout.flush()

    outcome: list[Reply | BaseException] = []

    def reply() -> None:
        try:
            outcome.append(call.run(show))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=reply, name="kvpilot-chat", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:  # Ctrl+C: stop the reply, keep what arrived
        call.stop()
        worker.join()
    got = outcome[0]
    if isinstance(got, BaseException):
        raise got
    if args.keep:
        store.save(profile.name, conversation.add(got.message()))
    if args.json:
        stats = got.stats.to_dict()
        print(json.dumps({"text": got.text, **{k: stats[k] for k in FIGURE_KEYS}}))
    else:
        print()
        print(stats_text(got.stats), file=sys.stderr)
    return 0
