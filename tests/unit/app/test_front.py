"""The front request both faces make: what the user left empty takes the single server's
defaults, and a limit out of range is still refused by the one check."""

from __future__ import annotations

import pytest

from kvpilot.core.app.front import DEFAULT_PORT, check_request, front_request
from kvpilot.core.base.errors import CommandError
from kvpilot.core.front.pool import FrontOptions


def test_empty_fields_take_the_defaults() -> None:
    req = front_request(["chat", "code"], host="", api_key="")
    assert req.profiles == ("chat", "code")
    assert (req.host, req.port, req.api_key) == ("127.0.0.1", DEFAULT_PORT, None)
    assert req.options == FrontOptions()
    check_request(req)


def test_limits_pass_through_and_are_checked() -> None:
    req = front_request(["chat"], idle_unload_s=90, max_loaded=1, max_queue=4,
                        queue_timeout_s=30.0, allow_sleep=False)
    opts = req.options
    assert (opts.idle_unload_s, opts.max_loaded, opts.max_queue) == (90.0, 1, 4)
    assert (opts.queue_timeout_s, opts.allow_sleep) == (30.0, False)
    with pytest.raises(CommandError, match="--idle-unload must be a positive"):
        check_request(front_request(["chat"], idle_unload_s=0))
