"""Real local HTTP servers for the chat tests: a threaded ``http.server`` whose POST handler a
test sets, and replies as a server sends them (an SSE stream, a JSON error)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Callable

PostHandler = Callable[[http.server.BaseHTTPRequestHandler], None]


class PostServer:
    """A threaded http.server on 127.0.0.1 whose POST handler a test sets; ``GET /v1/models``
    lists ``model``."""

    def __init__(self, model: str = "tiny-local") -> None:
        self.model = model
        self.handler: PostHandler = lambda h: h.send_error(404)
        self.bodies: list[dict[str, object]] = []
        self.headers: list[dict[str, str]] = []
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n))
                outer.bodies.append(body)
                outer.headers.append(dict(self.headers))
                outer.handler(self)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    json_reply(self, 200, {"object": "list", "data": [{"id": outer.model}]})
                else:
                    self.send_error(404)

            def log_message(self, *args: object) -> None:
                pass

        class _Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                pass  # a client that went away (timeout, stop tests) is expected here

        self.httpd = _Server(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def sse_reply(h: http.server.BaseHTTPRequestHandler, lines: list[str], *, pause_s: float = 0.0,
              close_early: bool = False) -> None:
    """Answer 200 with ``lines`` as server-sent events (``pause_s`` after each); with
    ``close_early`` the connection is cut after the last one."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Connection", "close")
    h.end_headers()
    for line in lines:
        h.wfile.write(f"{line}\n\n".encode())
        h.wfile.flush()
        if pause_s:
            time.sleep(pause_s)
    if close_early:
        h.connection.shutdown(socket.SHUT_RDWR)
    h.close_connection = True


def json_reply(h: http.server.BaseHTTPRequestHandler, status: int, doc: object) -> None:
    """Answer ``status`` with the JSON document ``doc``."""
    data = json.dumps(doc).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def piece(text: str, finish: str | None = None) -> str:
    """One ``data:`` line of a streamed chat completion carrying ``text``."""
    return "data: " + json.dumps(
        {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]}
    )
