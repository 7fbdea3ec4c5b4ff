"""One loopback rule for the launch's API-key check, the load test's targets and the watcher,
and one reading of a server URL the user typed."""

from __future__ import annotations

import pytest

from kvpilot.core.app.watch import WatchError, is_local_url, normalize_url
from kvpilot.core.base.hosts import is_loopback_host, server_root
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
