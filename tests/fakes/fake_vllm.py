"""A stand-in for the ``vllm`` program that replays real vLLM log lines.

Used where the real engine cannot produce a case (GPU-only failures such as CUDA out of memory)
or where timing must be controlled (the supervisor latency benchmark). It understands
``--version`` and ``serve MODEL --host H --port P ...`` (other flags are ignored) and is driven by
environment variables:

``FAKE_VLLM_MODE``        ``ready`` (default), ``fail`` or ``die_after_ready``
``FAKE_VLLM_LOG``         log file to replay (stdout; lines without the vLLM prefix go to stderr)
``FAKE_VLLM_LINE_DELAY_S`` pause between lines (default 0.001)
``FAKE_VLLM_FAIL_RE``     regex of the failing line; its print time is recorded (mode ``fail``)
``FAKE_VLLM_LINGER_S``    ``fail``: seconds to stay alive after the last line (default 0)
``FAKE_VLLM_EXIT``        ``fail``: exit status (default 1)
``FAKE_VLLM_IGNORE_TERM`` ``1``: ignore SIGINT and SIGTERM (as vLLM does while loading)
``FAKE_VLLM_DIE_AFTER_S`` ``die_after_ready``: seconds of serving before /health turns 503
``FAKE_VLLM_CHILD``       ``1``: start a sleeping child process (stands in for EngineCore)
``FAKE_VLLM_ECHO_ENV``   name of an environment variable to print (redaction tests)
``FAKE_VLLM_ARGV_FILE``   JSON file receiving the argv, the working directory, the API key
                          and the environment it was started with (argv-injection tests,
                          the faces' launches compared)
``FAKE_VLLM_FLOOD``       ``LINES,RATE``: once ready, print LINES log lines at RATE lines/s
``FAKE_VLLM_HUGE_LINE``   once ready, print one line of this many bytes (after any flood)
``FAKE_VLLM_MARKS``       JSON file receiving wall-clock times: ``listening_at``,
                          ``first_health_200_at``, ``fail_line_at``, ``dead_at``
``FAKE_VLLM_FAIL_UNLESS`` ``fail``: a regex on the serve arguments; when it matches, start as in
                          ``ready`` mode instead (a fallback that fixes the failure)
``FAKE_VLLM_HELP``        text printed for ``serve --help=all`` (default: the real 0.32.0 help)

In ``ready`` mode the lines up to ``Starting vLLM server on`` are printed, then the HTTP server
starts (``/health``, ``/v1/models``, ``/metrics`` from ``metrics_ready.txt``), then the rest.
``POST /v1/completions`` and ``/v1/chat/completions`` answer ``"text": "from <served name>"``
(``"stream": true``: server-sent events, one chunk per word, then ``data: [DONE]``); with
``VLLM_API_KEY`` set they need ``Authorization: Bearer <key>``, as vLLM's ``/v1`` routes do.

Sleep mode as vLLM has it: with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1`` (the
development endpoints) the server has ``POST /sleep?level=N``, ``POST /wake_up`` and
``GET /is_sleeping`` (``{"is_sleeping": bool}``); without them those routes are 404. A sleeping
server answers inference requests with 500 (its weights are not on the GPU). Each sleep and wake
is appended to ``FAKE_VLLM_SLEEP_LOG`` (``MODEL sleep LEVEL`` or ``MODEL wake_up``) when set.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "supervisor"
HELP = Path(__file__).resolve().parents[1] / "data" / "vllm_logs" / "serve_help_0.32.0_cpu.txt"
PREFIX_RE = re.compile(r"^\((?:APIServer|EngineCore|Worker|VllmWorker)[\w-]* pid=\d+\)")
_marks: dict[str, float] = {}
_marks_lock = threading.Lock()


def mark(name: str) -> None:
    path = os.environ.get("FAKE_VLLM_MARKS")
    with _marks_lock:
        if name in _marks:
            return
        _marks[name] = time.time()
        if path:
            tmp = path + ".tmp"
            Path(tmp).write_text(json.dumps(_marks))
            Path(tmp).replace(path)


def emit(line: str) -> None:
    stream = sys.stdout if PREFIX_RE.match(line) else sys.stderr
    try:
        stream.write(line + "\n")
        stream.flush()
    except OSError:  # the reader is gone (kvpilot killed): go on serving, as vLLM's logging does
        pass


class State:
    healthy = True
    model = ""
    metrics = ""
    sleep_mode = False
    sleeping = False


def note_sleep(text: str) -> None:
    path = os.environ.get("FAKE_VLLM_SLEEP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(text + "\n")


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/health":
            if State.healthy:
                mark("first_health_200_at")
                self._send(200, b"")
            else:
                self._send(503, b"")
        elif self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": State.model, "object": "model"}]}
            self._send(200, json.dumps(body).encode())
        elif self.path == "/metrics":
            self._send(200, State.metrics.encode(), "text/plain; version=0.0.4")
        elif self.path == "/is_sleeping" and State.sleep_mode:
            self._send(200, json.dumps({"is_sleeping": State.sleeping}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        path, _, query = self.path.partition("?")
        if path == "/sleep" and State.sleep_mode:
            level = dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("level", "1")
            State.sleeping = True
            note_sleep(f"{State.model} sleep {level}")
            self._send(200, b"")
        elif path == "/wake_up" and State.sleep_mode:
            State.sleeping = False
            note_sleep(f"{State.model} wake_up")
            self._send(200, b"")
        elif path in ("/v1/completions", "/v1/chat/completions"):
            key = os.environ.get("VLLM_API_KEY")
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                self._send(401, b'{"error": "Unauthorized"}')
            elif State.sleeping:
                self._send(500, b'{"error": "the engine is sleeping"}')
            elif body.get("stream"):
                self._stream(f"from {State.model}".split())
            else:
                answer = {"object": "text_completion", "model": State.model,
                          "choices": [{"index": 0, "text": f"from {State.model}"}]}
                self._send(200, json.dumps(answer).encode())
        else:
            self._send(404, b"{}")

    def _stream(self, words: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for word in words:
            chunk = {"model": State.model, "choices": [{"index": 0, "text": word}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(float(os.environ.get("FAKE_VLLM_STREAM_GAP_S", "0")))
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


def parse_serve(argv: list[str]) -> tuple[str, str, int, str | None]:
    model = argv[0]
    host, port, served = "127.0.0.1", 8000, None
    i = 1
    while i < len(argv):
        if argv[i] == "--host":
            host = argv[i + 1]
        elif argv[i] == "--port":
            port = int(argv[i + 1])
        elif argv[i] == "--served-model-name":
            served = argv[i + 1]
        i += 1
    return model, host, port, served


def main() -> int:
    argv = sys.argv[1:]
    argv_file = os.environ.get("FAKE_VLLM_ARGV_FILE")
    if argv_file:
        Path(argv_file).write_text(
            json.dumps(
                {"argv": argv, "cwd": str(Path.cwd()), "api_key": os.environ.get("VLLM_API_KEY"),
                 "env": dict(os.environ)}
            )
        )
    if argv[:1] == ["--version"]:
        print(os.environ.get("FAKE_VLLM_VERSION", "0.32.0"))
        return 0
    if argv[:2] == ["serve", "--help=all"]:
        print(Path(os.environ.get("FAKE_VLLM_HELP", str(HELP))).read_text())
        return 0
    if argv[:1] != ["serve"] or len(argv) < 2:
        print("usage: fake_vllm.py serve MODEL ...", file=sys.stderr)
        return 2
    if os.environ.get("FAKE_VLLM_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    model, host, port, served = parse_serve(argv[1:])
    State.model = served or model
    State.sleep_mode = ("--enable-sleep-mode" in argv
                        and os.environ.get("VLLM_SERVER_DEV_MODE") == "1")
    State.metrics = (DATA / "metrics_ready.txt").read_text()
    mode = os.environ.get("FAKE_VLLM_MODE", "ready")
    log = Path(os.environ.get("FAKE_VLLM_LOG", str(DATA / "startup_ready.log")))
    fixed = os.environ.get("FAKE_VLLM_FAIL_UNLESS")
    if mode == "fail" and fixed and re.search(fixed, " ".join(argv[1:])):
        mode, log = "ready", DATA / "startup_ready.log"
    delay = float(os.environ.get("FAKE_VLLM_LINE_DELAY_S", "0.001"))
    fail_re = re.compile(os.environ.get("FAKE_VLLM_FAIL_RE", r"^$^"))
    child = None
    if os.environ.get("FAKE_VLLM_CHILD") == "1":
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(3600)"], stdin=subprocess.DEVNULL
        )
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    echo = os.environ.get("FAKE_VLLM_ECHO_ENV")
    if echo:  # a leaky program: prints a secret it was given
        emit(f"(APIServer pid=1) INFO 11-29 08:09:54 [fake.py:1] {echo}={os.environ.get(echo)}")
    try:
        if mode == "fail":
            for line in lines:
                emit(line)
                if fail_re.search(line):
                    mark("fail_line_at")
                time.sleep(delay)
            time.sleep(float(os.environ.get("FAKE_VLLM_LINGER_S", "0")))
            return int(os.environ.get("FAKE_VLLM_EXIT", "1"))
        server: ThreadingHTTPServer | None = None
        for line in lines:
            if server is None and "Starting vLLM server on" in line:
                server = ThreadingHTTPServer((host, port), Handler)
                threading.Thread(target=server.serve_forever, daemon=True).start()
                mark("listening_at")
            emit(line)
            time.sleep(delay)
        if server is None:
            server = ThreadingHTTPServer((host, port), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            mark("listening_at")
        if mode == "die_after_ready":
            time.sleep(float(os.environ.get("FAKE_VLLM_DIE_AFTER_S", "1")))
            State.healthy = False
            mark("dead_at")
            emit(
                "(APIServer pid=1) ERROR 11-29 08:27:29 [async_llm.py:906] "
                "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                "See stack trace (above) for the root cause."
            )
            time.sleep(5.0)
            return 0
        flood = os.environ.get("FAKE_VLLM_FLOOD")
        if flood:
            count, rate = (int(x) for x in flood.split(","))
            started = time.monotonic()
            line = "(APIServer pid=1) INFO 11-29 08:10:45 [loggers.py:1] flood line {:09d}\n"
            for i in range(0, count, 1000):  # in bursts of 1000 lines, paced to RATE
                sys.stdout.write("".join(line.format(j) for j in range(i, min(count, i + 1000))))
                sys.stdout.flush()
                ahead = started + (i + 1000) / rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            mark("flood_done_at")
        huge = int(os.environ.get("FAKE_VLLM_HUGE_LINE", "0"))
        if huge:
            sys.stdout.write("(APIServer pid=1) INFO huge " + "x" * huge + "\n")
            sys.stdout.flush()
            emit("(APIServer pid=1) INFO 11-29 08:10:46 [fake.py:1] after the huge line")
            mark("huge_done_at")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        if child is not None and os.environ.get("FAKE_VLLM_KEEP_CHILD") != "1":
            child.terminate()


if __name__ == "__main__":
    sys.exit(main())
