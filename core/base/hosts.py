"""Server addresses, read once: which host names mean this machine (for the API-key rule of a
launch, the load test's loopback-only targets and whether a watched server runs here) and how a
server URL the user typed is read (by ``bench``, ``watch`` and the GUI's attach dialog), and the
rules for the address a server listens on (a launch and a front)."""

from __future__ import annotations

import ipaddress

from kvpilot.core.base.errors import CommandError

#: what a server URL looks like, in every message about one
URL_EXAMPLE = "http://127.0.0.1:8000"
#: the ``--url`` help of the commands that talk to a running server
URL_HELP = f"the server, e.g. {URL_EXAMPLE} (a /v1 at the end is fine)"

#: names that resolve to the loopback interface (compared case-insensitively)
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """True for a loopback name or address (``localhost``, ``127.0.0.5``, ``::1``, ``[::1]``)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_is_sendable(api_key: str | None) -> bool:
    """True where ``api_key`` can travel in an HTTP header (``Authorization: Bearer``): none, or
    printable ASCII without spaces (a pasted space, line break or accent cannot)."""
    return not api_key or all("!" <= ch <= "~" for ch in api_key)


def check_listen_address(
    host: str, port: object, api_key: str | None, *, serves: str = "the model", key_hint: str = ""
) -> None:
    """The rules for where a server listens: a TCP port, a key for any address other than this
    machine's loopback, a key an HTTP client can send. ``serves`` names what would be exposed
    (``the models`` for a front); ``key_hint`` says where the key comes from (`` (ENV)``).

    Raises:
        CommandError: the port is out of range, a wide address has no API key, or the key holds
            a character no HTTP client can send.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise CommandError(f"port {port!r} is out of range; pick one in 1-65535 (e.g. 8000)")
    if not is_loopback_host(host) and not api_key:
        raise CommandError(
            f"serving on {host} exposes {serves} to the network; set an API key{key_hint} "
            "or use host 127.0.0.1"
        )
    if not key_is_sendable(api_key):
        raise CommandError(
            "the API key holds a space, a line break or a non-ASCII character, which no HTTP "
            "client can send; use printable ASCII characters only"
        )


def server_root(url: str) -> str:
    """The root ``http(s)://host[:port]`` of the server at ``url``, as a user types it.

    No scheme means ``http://``; a trailing ``/``, a ``/v1`` (the address OpenAI clients are
    given), a query and a fragment are dropped, so ``127.0.0.1:8000/v1/`` reads as
    ``http://127.0.0.1:8000``.

    Raises:
        ValueError: not an http(s) URL with a host; the message names the text and gives an
            example.
    """
    import httpx  # here: the launch path imports this module and does not need httpx

    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    shown = repr(url[:100])
    try:
        parsed = httpx.URL(raw)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{shown} is not a URL ({exc}); give one like {URL_EXAMPLE}") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{shown} is not an http URL; give one like {URL_EXAMPLE}")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise ValueError(
            f"{shown} names port {parsed.port}, outside 1-65535; give one like {URL_EXAMPLE}"
        )
    try:
        parsed.host.encode("idna")  # what the resolver needs: labels of at most 63 characters
    except UnicodeError as exc:
        raise ValueError(
            f"{shown} does not name a host ({exc}); give one like {URL_EXAMPLE}"
        ) from exc
    text = str(parsed.copy_with(query=None, fragment=None)).rstrip("/")
    return text[: -len("/v1")] if text.endswith("/v1") else text
