"""One loopback rule for the launch's API-key check, the load test's targets and the watcher,
one reading of a server URL the user typed, and one rule for the address a server or a front
listens on."""

from __future__ import annotations

import pytest

from kvpilot.core.app.watch import WatchError, is_local_url, normalize_url
from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.hosts import (
    check_listen_address,
    is_loopback_host,
    key_is_sendable,
    server_root,
)
from kvpilot.core.vllm.client import LoadTestError, check_target


@pytest.mark.parametrize(
    "host", ["localhost", "LocalHost", "localhost.localdomain", "ip6-localhost", "127.0.0.1",
             "127.0.0.5", "::1", "[::1]"],
)
def test_loopback_names_and_addresses(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.2", "example.com", "::", "", "[fe80::1]"])
def test_other_hosts_are_not_loopback(host: str) -> None:
    assert not is_loopback_host(host)


def test_a_watched_url_is_local_by_its_host() -> None:
    assert is_local_url("http://LOCALHOST:8000")
    assert not is_local_url("http://10.0.0.2:8000")


@pytest.mark.parametrize(
    ("typed", "root"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),  # what OpenAI clients are given
        ("127.0.0.1:8000/v1/", "http://127.0.0.1:8000"),
        ("  https://box.lan:9000/  ", "https://box.lan:9000"),
        ("http://[::1]:8000/?x=1#top", "http://[::1]:8000"),
        ("http://localhost:8000/proxy", "http://localhost:8000/proxy"),
    ],
)
def test_a_typed_server_url_reads_as_its_root(typed: str, root: str) -> None:
    assert server_root(typed) == root


@pytest.mark.parametrize(
    ("typed", "says"),
    [("ftp://127.0.0.1/", "not an http URL"), ("http://", "not an http URL"),
     ("http://" + "a" * 64 + ".lan:1", "does not name a host"), ("http://[::1", "not a URL"),
     # a port the socket layer cannot take (found by the attach form's fuzz test)
     ("HTTP://0:9223372036854775808", "outside 1-65535"), ("http://h:0", "outside 1-65535")],
)
def test_a_bad_server_url_is_named_with_an_example(typed: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as caught:
        server_root(typed)
    assert "http://127.0.0.1:8000" in str(caught.value)


def test_bench_and_watch_read_a_url_alike() -> None:
    """The load test used to keep ``/v1`` (and asked ``/v1/v1/models``) and to refuse a URL
    without a scheme that ``watch`` took."""
    for typed in ("http://127.0.0.1:8000/v1", "localhost:8000"):
        assert check_target(typed) == normalize_url(typed) == server_root(typed)
    with pytest.raises(LoadTestError, match="not an http URL"):
        check_target("ftp://127.0.0.1/")
    with pytest.raises(WatchError, match="not an http URL"):
        normalize_url("ftp://127.0.0.1/")


@pytest.mark.parametrize(
    ("host", "port", "key", "says"),
    [
        ("127.0.0.1", 0, None, "port 0 is out of range"),
        ("127.0.0.1", 65536, None, "port 65536 is out of range"),
        ("127.0.0.1", True, None, "port True is out of range"),
        ("0.0.0.0", 8000, None, "serving on 0.0.0.0 exposes the model to the network"),
        ("10.0.0.2", 8000, "sk key", "printable ASCII"),
        ("127.0.0.1", 8000, "sk-\u00e9", "printable ASCII"),
    ],
)
def test_a_listen_address_outside_the_rules_is_refused_with_the_fix(
    host: str, port: object, key: str | None, says: str
) -> None:
    with pytest.raises(CommandError, match=says):
        check_listen_address(host, port, key)


def test_a_listen_address_inside_the_rules_passes() -> None:
    check_listen_address("localhost", 8000, None)
    check_listen_address("0.0.0.0", 1, "sk-abc")
    assert key_is_sendable(None) and key_is_sendable("") and key_is_sendable("sk-~!")
    assert not key_is_sendable("sk abc") and not key_is_sendable("sk\n")


def test_a_front_names_what_it_exposes_and_where_the_key_comes_from() -> None:
    with pytest.raises(CommandError) as err:
        check_listen_address("0.0.0.0", 8000, None, serves="the models",
                             key_hint=" (KVPILOT_API_KEY)")
    assert str(err.value) == ("serving on 0.0.0.0 exposes the models to the network; set an "
                              "API key (KVPILOT_API_KEY) or use host 127.0.0.1")
