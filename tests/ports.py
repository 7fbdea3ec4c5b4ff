"""Ports for the tests' servers, apart for each pytest process that ``tests/run`` runs at once.

``tests/run`` runs the tests that start servers in more than one pytest process side by side;
each process gets its own block of ports (``KVPILOT_TEST_PORT_OFFSET``, set by
``tests/conftest.py`` from ``--part``), so that two servers never pick the same free port in the
moment between the check and the bind.
"""

from __future__ import annotations

import os

from kvpilot.core.vllm.command import find_free_port

PORT_OFFSET_ENV = "KVPILOT_TEST_PORT_OFFSET"


def port_offset() -> int:
    """How far this process's ports are moved from the numbers the tests name (0 by default)."""
    return int(os.environ.get(PORT_OFFSET_ENV, "0") or 0)


def free_port(preferred: int) -> int:
    """A free port on 127.0.0.1 at or after ``preferred`` moved into this process's block.

    Raises:
        OSError: no free port in the 50 after it.
    """
    return find_free_port("127.0.0.1", preferred + port_offset())
