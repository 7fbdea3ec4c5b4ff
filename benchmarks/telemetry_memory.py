"""Memory of 24 hours of telemetry at 2 Hz (goal: <= 50 MB).

Fills a default :class:`Telemetry` (172,800 rows per source) with a full day of samples: vLLM
scrapes built from the real 0.32.0 payload with growing counters and histograms, and NVML samples
with four processes. Prints the ring buffers' size, the process RSS growth (psutil) and the peak
of Python allocations during the fill (tracemalloc), then the cost of one ``series()`` read of
10 minutes and of ``latest()``.

    .venv/bin/python benchmarks/telemetry_memory.py [--hours 24] [--rate-hz 2]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil

from kvpilot.core.telemetry.live import Telemetry, TelemetryConfig
from kvpilot.core.vllm.metrics import HistogramSnapshot, parse_metrics

PAYLOAD = Path(__file__).resolve().parents[1] / "tests" / "data" / "metrics" / "metrics_after.txt"
MB = 1e6
GOAL_MB = 50.0


def _grow(h: HistogramSnapshot | None, i: int) -> HistogramSnapshot | None:
    """Add one observation per sample, in the bucket a third of the way up."""
    if h is None:
        return None
    first = len(h.upper_bounds) // 3
    counts = tuple(c + (i if k >= first else 0) for k, c in enumerate(h.cumulative_counts))
    return replace(h, cumulative_counts=counts, count=counts[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--rate-hz", type=float, default=2.0)
    args = parser.parse_args()
    rows = int(args.hours * 3600 * args.rate_hz)
    base = parse_metrics(PAYLOAD.read_text(encoding="utf-8"), 0.0)
    proc = psutil.Process()
    gc.collect()
    rss0 = proc.memory_info().rss
    tracemalloc.start()
    tel = Telemetry(TelemetryConfig(capacity=rows))
    tel.set_vllm_pids([100, 101, 102])
    dt = 1.0 / args.rate_hz
    t0 = time.perf_counter()
    for i in range(rows):
        t = i * dt
        tel.add_vllm_sample(
            replace(
                base,
                t_monotonic_s=t,
                generation_tokens_total=base.generation_tokens_total + 400.0 * i,
                prompt_tokens_total=base.prompt_tokens_total + 100.0 * i,
                running=float(i % 5),
                kv_usage_frac=(i % 100) / 100,
                ttft=_grow(base.ttft, i),
                itl=_grow(base.itl, i),
                e2e=_grow(base.e2e, i),
                tpot=_grow(base.tpot, i),
            )
        )
        tel.add_gpu_sample(
            SimpleNamespace(
                t_monotonic_s=t + dt / 2,
                memory_used_bytes=20e9 + (i % 7) * 1e6,
                memory_total_bytes=25.7e9,
                gpu_util_percent=90.0,
                power_w=350.0,
                temperature_c=70.0,
                sm_clock_mhz=2520.0,
                process_used_bytes={100: 18e9, 101: 1e8, 102: 1e8, 555: 1e9},
            )
        )
    fill_s = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.collect()
    rss = proc.memory_info().rss - rss0
    t1 = time.perf_counter()
    for _ in range(100):
        tel.series("generation_tokens_per_s", 600.0, now_s=rows * dt)
    read_ms = (time.perf_counter() - t1) * 10
    t2 = time.perf_counter()
    for _ in range(100):
        tel.latest()
    latest_ms = (time.perf_counter() - t2) * 10
    t, y = tel.series("ttft_p99_s")
    print(
        f"{args.hours:g} h at {args.rate_hz:g} Hz = {rows:,} rows per source "
        f"({len(tel.series('running')[0]):,} kept; filled in {fill_s:.1f} s, "
        f"{fill_s / rows * 1e6:.0f} us per vLLM+GPU sample pair)"
    )
    print(f"  ring buffers                 {tel.nbytes / MB:6.1f} MB")
    print(f"  RSS growth after the fill    {rss / MB:6.1f} MB")
    print(f"  peak Python allocations      {peak / MB:6.1f} MB (tracemalloc)")
    print(f"  series(10 min window)        {read_ms:6.3f} ms per call")
    print(f"  latest()                     {latest_ms:6.3f} ms per call")
    print(
        f"  last TTFT P99 {y[-1]:.3f} s, generation {tel.latest()['generation_tokens_per_s']:.0f}"
        " tokens/s"
    )
    ok = max(rss, peak) / MB <= GOAL_MB
    print(f"{'meets' if ok else 'MISSES'} the goal (<= {GOAL_MB:g} MB)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
