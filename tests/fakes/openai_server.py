"""A stand-in OpenAI server of vLLM on 127.0.0.1: ``/version``, ``/v1/models``, ``/metrics``.

``/metrics`` answers with a real vLLM 0.32 CPU scrape (tests/data/metrics/metrics_during.txt);
``die()`` closes the socket (a server that goes away mid-watch); with ``api_key`` the ``/v1``
routes answer 401 without the Bearer token, as vLLM does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
METRICS = (DATA / "metrics" / "metrics_during.txt").read_text()


class FakeServer:
    """An OpenAI-style server on 127.0.0.1 answering /version, /v1/models and /metrics."""

    def __init__(self, root: str, *, api_key: str | None = None) -> None:
        outer = self
        self.root = root
        self.api_key = api_key
        self.requests: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append(self.path)
                authorized = self.headers.get("Authorization") == f"Bearer {outer.api_key}"
                if outer.api_key and not authorized and self.path.startswith("/v1"):
                    self._send(401, b'{"error": "Unauthorized"}', "application/json")
                    return
                if self.path == "/version":
                    self._send(200, b'{"version": "0.32.0"}', "application/json")
                elif self.path == "/v1/models":
                    body = {"object": "list", "data": [
                        {"id": "tiny", "root": outer.root, "max_model_len": 16384}]}
                    self._send(200, json.dumps(body).encode(), "application/json")
                elif self.path == "/metrics":
                    self._send(200, METRICS.encode(), "text/plain; version=0.0.4")
                else:
                    self._send(404, b"{}", "application/json")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def die(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
