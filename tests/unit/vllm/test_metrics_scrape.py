"""MetricsScraper over real local HTTP, and MetricsSampler's thread that never dies."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from kvpilot.core.telemetry.live import Telemetry
from kvpilot.core.vllm.metrics import (
    MetricsSample,
    MetricsSampler,
    MetricsScraper,
    ScrapeError,
    ScrapeErrorKind,
)


def test_scrape_real_payload_over_http(local_server, payload):
    local_server.serve_text(payload("during"))
    scraper = MetricsScraper(local_server.base_url + "/", timeout_s=5.0)
    try:
        sample = scraper.scrape()
    finally:
        scraper.close()
    assert scraper.url == local_server.base_url + "/metrics"
    assert sample.has_vllm_metrics and sample.generation_tokens_total == 8844.0
    assert sample.t_monotonic_s == pytest.approx(time.monotonic(), abs=5.0)


@pytest.mark.parametrize("status", [404, 500, 503])
def test_http_status_is_typed(local_server, status):
    local_server.serve_text("nope\n", status=status)
    scraper = MetricsScraper(local_server.base_url, timeout_s=5.0)
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    scraper.close()
    assert info.value.kind is ScrapeErrorKind.HTTP_STATUS and str(status) in str(info.value)


def test_empty_body(local_server):
    local_server.serve_text("")
    scraper = MetricsScraper(local_server.base_url, timeout_s=5.0)
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    scraper.close()
    assert info.value.kind is ScrapeErrorKind.EMPTY


def test_connection_cut_mid_body(local_server, payload):
    body = payload("after").encode()

    def cut(h):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[: len(body) // 2])
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)

    local_server.handler = cut
    scraper = MetricsScraper(local_server.base_url, timeout_s=5.0)
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    scraper.close()
    assert info.value.kind is ScrapeErrorKind.TRUNCATED


def test_slow_server_times_out(local_server):
    release = threading.Event()

    def slow(h):
        release.wait(5.0)

    local_server.handler = slow
    scraper = MetricsScraper(local_server.base_url, timeout_s=0.2)
    t0 = time.monotonic()
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    elapsed = time.monotonic() - t0
    release.set()
    scraper.close()
    assert info.value.kind is ScrapeErrorKind.TIMEOUT
    assert elapsed < 2.0


def test_nothing_listening_is_connect_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    scraper = MetricsScraper(f"http://127.0.0.1:{port}", timeout_s=1.0)
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    scraper.close()
    assert info.value.kind is ScrapeErrorKind.CONNECT
    assert "is the server running" in str(info.value)


def test_not_utf8_is_malformed():
    transport = httpx.MockTransport(lambda _req: httpx.Response(200, content=b"\xff\xfe\x00bad\n"))
    scraper = MetricsScraper("http://127.0.0.1:1", transport=transport)
    with pytest.raises(ScrapeError) as info:
        scraper.scrape()
    assert info.value.kind is ScrapeErrorKind.MALFORMED


def test_bad_arguments():
    with pytest.raises(ValueError, match="timeout_s"):
        MetricsScraper("http://127.0.0.1:1", timeout_s=0)


class _ScriptedScraper:
    """Replays a script of outcomes: a sample, a ScrapeError or any other exception."""

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = 0
        self.done = threading.Event()

    def scrape(self) -> MetricsSample:
        self.calls += 1
        if not self.outcomes:
            self.done.set()
            raise ScrapeError(ScrapeErrorKind.CONNECT, "script over")
        item = self.outcomes.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item


def test_sampler_survives_every_failure_and_records_gaps(payload):
    from kvpilot.core.vllm.metrics import parse_metrics

    good = parse_metrics(payload("during"), 0.0)
    outcomes = [
        good,
        ScrapeError(ScrapeErrorKind.TIMEOUT, "slow"),
        RuntimeError("bug in a parser"),
        good,
        KeyError("x"),
    ]
    scraper = _ScriptedScraper(outcomes)
    telemetry = Telemetry()
    errors: list[ScrapeError] = []

    def on_sample(sample):
        telemetry.add_vllm_sample(sample)

    def on_error(t, err):
        errors.append(err)
        telemetry.add_scrape_error(t, err)

    sampler = MetricsSampler(scraper, on_sample, on_error, interval_s=0.01)
    sampler.start()
    assert scraper.done.wait(5.0)
    sampler.stop()
    assert not sampler.running
    assert sampler.samples_ok == 2
    assert sampler.samples_failed >= 4
    kinds = [e.kind for e in errors[:3]]
    assert kinds == [ScrapeErrorKind.TIMEOUT, ScrapeErrorKind.MALFORMED, ScrapeErrorKind.MALFORMED]
    assert "bug in a parser" in str(errors[1])
    _, running = telemetry.series("running")
    assert running.size >= 6
    assert running[0] == 0.0 and running[1] != running[1]  # a real zero, then a NaN gap
    assert telemetry.latest().last_scrape_error is not None


def test_sampler_survives_raising_callbacks(payload):
    from kvpilot.core.vllm.metrics import parse_metrics

    good = parse_metrics(payload("before"), 0.0)
    scraper = _ScriptedScraper([good, good, ScrapeError(ScrapeErrorKind.EMPTY, "empty")])

    def boom(*args):
        raise RuntimeError("callback bug")

    sampler = MetricsSampler(scraper, boom, boom, interval_s=0.01)
    sampler.start()
    assert scraper.done.wait(5.0)
    sampler.stop()
    assert sampler.samples_ok == 2 and scraper.calls >= 4


def test_sampler_rate_against_http_server(local_server, payload):
    local_server.serve_text(payload("after"))
    scraper = MetricsScraper(local_server.base_url, timeout_s=2.0)
    got: list[MetricsSample] = []
    sampler = MetricsSampler(scraper, got.append, lambda *_: None, interval_s=0.05)
    sampler.start()
    time.sleep(0.6)
    sampler.stop()
    scraper.close()
    assert 3 <= len(got) <= 14
    times = [s.t_monotonic_s for s in got]
    assert times == sorted(times)
    with pytest.raises(ValueError, match="interval_s"):
        MetricsSampler(scraper, got.append, lambda *_: None, interval_s=0)


def test_sampler_counts_the_ticks_a_slow_scrape_skipped(payload):
    from kvpilot.core.vllm.metrics import parse_metrics

    good = parse_metrics(payload("during"), 0.0)

    class Slow(_ScriptedScraper):
        def scrape(self) -> MetricsSample:
            if self.calls == 1:
                time.sleep(0.35)  # the second scrape takes 3.5 slots of 0.1 s
            return super().scrape()

    scraper = Slow([good, good, good])
    got: list[MetricsSample] = []
    sampler = MetricsSampler(scraper, got.append, lambda *_: None, interval_s=0.1)
    sampler.start()
    assert scraper.done.wait(5.0)
    sampler.stop()
    assert len(got) == 3
    # the slots at 0.2, 0.3 and 0.4 s passed unused (one or two more on a stalled machine)
    assert 3 <= sampler.samples_skipped <= 5
