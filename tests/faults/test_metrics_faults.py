"""A /metrics endpoint that misbehaves: garbage, a cut-off body, HTTP 500, a 50 MB body, a
response that never ends, one that never starts. Each is a gap in the plots, one warning per
streak of failures, the sampler goes on, and memory stays bounded.
"""

from __future__ import annotations

import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from kvpilot.core.telemetry.live import Telemetry
from kvpilot.core.vllm.metrics import (
    MAX_BODY_BYTES,
    MetricsSampler,
    MetricsScraper,
    ScrapeErrorKind,
)

TESTS = Path(__file__).resolve().parents[1]
GOOD = (TESTS / "data/metrics/metrics_during.txt").read_bytes()


class _Endpoint:
    mode = "good"
    stop = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_: object) -> None:
        pass

    def _headers(self, status: int, length: int | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        if length is None:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_GET(self) -> None:
        mode = _Endpoint.mode
        try:
            if mode == "good":
                self._headers(200, len(GOOD))
                self.wfile.write(GOOD)
            elif mode == "garbage":
                body = b"\x00\xffnot prometheus {{{ at all\n" * 50
                self._headers(200, len(body))
                self.wfile.write(body)
            elif mode == "truncated":
                self._headers(200, len(GOOD))
                self.wfile.write(GOOD[: len(GOOD) // 2])
                self.close_connection = True
            elif mode == "http500":
                body = b"Internal Server Error\n"
                self._headers(500, len(body))
                self.wfile.write(body)
            elif mode in ("huge", "huge_chunked"):
                size = 50 << 20
                self._headers(200, None if mode == "huge_chunked" else size)
                line = b"vllm:num_requests_running 1\n" * 4096
                sent = 0
                while sent < size and not _Endpoint.stop.is_set():
                    chunk = line if mode == "huge" else b"%x\r\n%s\r\n" % (len(line), line)
                    self.wfile.write(chunk)
                    sent += len(line)
            elif mode == "endless":  # a body that trickles on for ever
                self._headers(200, None)
                line = b"vllm:num_requests_running 1\n"
                while not _Endpoint.stop.is_set():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    time.sleep(0.05)
            elif mode == "silent":  # headers never come
                _Endpoint.stop.wait(10)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Endpoint.mode = "good"
    _Endpoint.stop.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    _Endpoint.stop.set()
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("garbage", ScrapeErrorKind.MALFORMED),
        ("truncated", ScrapeErrorKind.TRUNCATED),
        ("http500", ScrapeErrorKind.HTTP_STATUS),
        ("huge", ScrapeErrorKind.TOO_LARGE),
        ("huge_chunked", ScrapeErrorKind.TOO_LARGE),
        ("endless", ScrapeErrorKind.TIMEOUT),
        ("silent", ScrapeErrorKind.TIMEOUT),
    ],
)
def test_a_bad_metrics_answer_is_a_gap_one_warning_and_the_sampler_goes_on(
    endpoint: str, mode: str, kind: ScrapeErrorKind, caplog: pytest.LogCaptureFixture
) -> None:
    telemetry = Telemetry()
    kinds: list[ScrapeErrorKind] = []

    def on_error(t_s: float, err) -> None:
        kinds.append(err.kind)
        telemetry.add_scrape_error(t_s, err)

    scraper = MetricsScraper(endpoint, timeout_s=1.0)
    sampler = MetricsSampler(scraper, telemetry.add_vllm_sample, on_error, interval_s=0.1)
    tracemalloc.start()
    caplog.set_level(logging.WARNING, logger="kvpilot.metrics")
    try:
        sampler.start()
        deadline = time.monotonic() + 5
        while sampler.samples_ok < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        t_fault = time.monotonic()
        _Endpoint.mode = mode
        while len(kinds) < 3 and time.monotonic() < t_fault + 20:
            time.sleep(0.02)
        detect_s = time.monotonic() - t_fault
        _Endpoint.mode = "good"
        ok_before = sampler.samples_ok
        deadline = time.monotonic() + 10
        while sampler.samples_ok < ok_before + 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sampler.stop()
        scraper.close()
    mb = peak / 2**20
    print(f"/metrics {mode}: 3 gaps ({kinds[0].value}) in {detect_s:.2f} s; peak {mb:.1f} MB")
    assert kinds[:3] == [kind] * 3
    assert sampler.samples_ok >= ok_before + 2  # the sampler went on and recovered
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and sampler.warnings_logged == 1  # one per streak, not per scrape
    _, running = telemetry.series("running")
    assert np.isnan(running).sum() >= 3  # the gap, never a zero
    assert running[~np.isnan(running)].size >= 4
    assert peak < 3 * MAX_BODY_BYTES  # a 50 MB answer is never held whole
