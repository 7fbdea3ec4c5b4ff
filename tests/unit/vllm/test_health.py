"""The supervisor's HTTP questions: ready, dead or hung, and the exact KV figures."""

from __future__ import annotations

import time

import httpx
import pytest
from testpaths import DATA

from kvpilot.core.base import failures
from kvpilot.core.vllm.health import HealthWatch, cache_capacity_from_metrics, serves_model


def _client(handler) -> httpx.Client:
    return httpx.Client(base_url="http://127.0.0.1:8000", transport=httpx.MockTransport(handler))


def test_ready_means_health_and_the_served_model_listed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            return httpx.Response(200)
        return httpx.Response(200, json={"data": [{"id": "tiny"}]})

    with _client(handler) as client:
        assert serves_model(client, "tiny")
        assert serves_model(client, "")  # any model
        assert not serves_model(client, "other")


@pytest.mark.parametrize("models", [httpx.Response(503), httpx.Response(200, text="<html>")])
def test_not_ready_while_models_fail_or_answer_garbage(models: httpx.Response) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200) if request.url.path == "/health" else models

    with _client(handler) as client:
        assert not serves_model(client, "tiny")


def test_a_refused_connection_or_a_503_is_a_dead_engine() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with _client(refused) as client:
        assert HealthWatch(30).check(client, lambda: False)[0] == failures.ENGINE_DIED
    with _client(lambda _request: httpx.Response(503)) as client:
        kind, message = HealthWatch(30).check(client, lambda: False)
        assert kind == failures.ENGINE_DIED and "503" in message
    with _client(lambda _request: httpx.Response(200)) as client:
        assert HealthWatch(30).check(client, lambda: False) is None


def test_slow_is_not_hung_until_silent_for_the_limit_and_an_answer_resets_it() -> None:
    answer = {"ok": False}

    def handler(request: httpx.Request) -> httpx.Response:
        if answer["ok"]:
            return httpx.Response(200)
        raise httpx.ReadTimeout("slow", request=request)

    watch = HealthWatch(hung_after_s=0.2)
    with _client(handler) as client:
        assert watch.check(client, lambda: False) is None  # silent, but not for long
        time.sleep(0.25)
        assert watch.check(client, lambda: True) is None  # the process is gone: not "hung"
        kind, message = watch.check(client, lambda: False)
        assert kind == failures.SERVER_HUNG and "has not answered /health" in message
        answer["ok"] = True
        assert watch.check(client, lambda: False) is None
        answer["ok"] = False
        assert watch.check(client, lambda: False) is None  # the silence counts from anew


def test_the_kv_figures_come_from_cache_config_info_on_releases_that_export_it() -> None:
    payload = (DATA / "metrics" / "metrics_before.txt").read_text()
    with _client(lambda _request: httpx.Response(200, text=payload)) as client:
        figures = cache_capacity_from_metrics(client, "0.32.0")
        assert figures is not None and figures.get("num_blocks")
        assert cache_capacity_from_metrics(client, "0.6.0") is None
    with _client(lambda _request: httpx.Response(200, text="\x00garbage{")) as client:
        assert cache_capacity_from_metrics(client, "0.32.0") is None
