"""Which host names mean this machine, defined once: for the API-key rule of a launch, the
load test's loopback-only targets and whether a watched server runs here."""

from __future__ import annotations

import ipaddress

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
