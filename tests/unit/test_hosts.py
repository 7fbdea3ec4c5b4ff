"""One loopback rule for the launch's API-key check, the load test's targets and the watcher."""

from __future__ import annotations

import pytest

from kvpilot.core.hosts import is_loopback_host
from kvpilot.core.vllm.watch import is_local_url


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
