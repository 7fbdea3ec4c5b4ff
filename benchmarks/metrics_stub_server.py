"""A stand-in vLLM ``/metrics`` endpoint for the telemetry benchmarks, run as a child process.

    python benchmarks/metrics_stub_server.py PAYLOAD [--grow-generation]

Serves PAYLOAD (a recorded /metrics body) on a free loopback port and prints that port on its
first line. ``--grow-generation`` adds 400 generated tokens per scrape, so rates are not zero.
"""

from __future__ import annotations

import argparse
import http.server
import subprocess
import sys
from pathlib import Path

GENERATION = 'vllm:generation_tokens_total{engine="0",model_name="/data/tinymodel"} '


def start(payload: Path, *, grow_generation: bool = False) -> tuple[subprocess.Popen[str], int]:
    """Start the server in a child process; returns it and its port."""
    argv = [sys.executable, __file__, str(payload)] + (["--grow-generation"] if grow_generation
                                                       else [])
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, int(child.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("payload", type=Path)
    parser.add_argument("--grow-generation", action="store_true")
    args = parser.parse_args()
    text = args.payload.read_text(encoding="utf-8")
    scrapes = [0]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            scrapes[0] += 1
            body = text
            if args.grow_generation:
                body = text.replace(GENERATION + "32961.0",
                                    GENERATION + f"{32961 + 400 * scrapes[0]}.0")
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
