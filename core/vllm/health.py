"""What the supervisor asks a vLLM server over HTTP: ready yet, still alive, what it reports.

* :func:`serves_model`: ``/health`` answers 200 and ``/v1/models`` lists the served model;
* :class:`HealthWatch`: once ready, tells a dead server (connection refused, 503) and a hung
  one (alive, silent on ``/health`` for ``hung_after_s``) from one that is merely slow;
* :func:`cache_capacity_from_metrics`: the KV figures of ``vllm:cache_config_info`` (releases
  that export it), which are exact where the log's are rounded.

The caller owns the :class:`httpx.Client` (base URL, API key, timeouts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kvpilot.core.base import failures
from kvpilot.core.base.versions import supports

if TYPE_CHECKING:
    import httpx


def serves_model(client: httpx.Client, model_name: str) -> bool:
    """True when the server is up and serves ``model_name`` (any model when it is "")."""
    import httpx

    try:
        r = client.get("/health")
        if r.status_code != 200:
            return False
        m = client.get("/v1/models")
        if m.status_code != 200:
            return False
        ids = [str(d.get("id")) for d in m.json().get("data", [])]
    except (httpx.HTTPError, ValueError):
        return False
    return model_name in ids or (not model_name and bool(ids))


class HealthWatch:
    """The ``/health`` check of a ready server, with the memory a hang needs.

    ``hung_after_s``: seconds a server may leave ``/health`` unanswered while its process is
    alive before it counts as hung. Not thread-safe: one monitor thread calls :meth:`check`.
    """

    def __init__(self, hung_after_s: float) -> None:
        self.hung_after_s = hung_after_s
        self._unanswered_since: float | None = None

    def check(
        self, client: httpx.Client, leader_exited: Callable[[], bool]
    ) -> tuple[str, str] | None:
        """(failure kind, message) when the ready server is dead or hung, else None.
        ``leader_exited`` tells whether vLLM's process is gone (then it is not "hung")."""
        import httpx

        sent = time.monotonic()
        try:
            r = client.get("/health")
        except httpx.ConnectError:
            return (
                failures.ENGINE_DIED,
                "the server stopped accepting connections after it was ready",
            )
        except httpx.HTTPError:
            # slow under load is not dead; alive but silent for hung_after_s is hung
            if self._unanswered_since is None:
                self._unanswered_since = sent  # silent since the unanswered request went out
            silent = time.monotonic() - self._unanswered_since
            if silent >= self.hung_after_s and not leader_exited():
                return (
                    failures.SERVER_HUNG,
                    f"vLLM has not answered /health for {silent:.0f} s although its process is "
                    "alive (hung or stopped); kvpilot stopped it: start it again",
                )
            return None
        self._unanswered_since = None
        if r.status_code == 503:
            return (
                failures.ENGINE_DIED,
                "the engine died after the server was ready (/health answered 503)",
            )
        return None


def cache_capacity_from_metrics(client: httpx.Client, version: str) -> Mapping[str, Any] | None:
    """The KV figures ``/metrics`` exports in ``vllm:cache_config_info`` (None: the release
    has no such metric, or the endpoint did not answer with a readable payload)."""
    import httpx

    from kvpilot.core.vllm import metrics

    if not supports("cache_config_info_metric", version):
        return None
    try:
        r = client.get("/metrics")
        if r.status_code != 200:
            return None
        return metrics.parse_metrics(r.text, time.monotonic()).cache_config_capacity()
    except (httpx.HTTPError, metrics.ScrapeError):
        return None
