"""CPU share of live telemetry: /metrics scraping + NVML sampling at 2 Hz (goal < 1 % of a core).

A child process serves the real vLLM 0.32.0 payload (``tests/data/metrics/metrics_after.txt``)
on 127.0.0.1 with counters that grow on every request. This process runs what the app runs while
a server is up: :class:`MetricsSampler` (httpx GET + fast parse) and the hardware
:class:`GpuSampler` (on the recorded ``rtx4090-desktop`` NVML replay, as there is no GPU here),
both feeding one :class:`Telemetry`, plus a 5 Hz reader standing in for the dashboard timer.
Only this process's CPU time is counted (the child server's is not).

    .venv/bin/python benchmarks/telemetry_cpu.py [--seconds 60] [--rate-hz 2]
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import metrics_stub_server  # benchmarks/, beside this script
import psutil

from kvpilot.core.hardware.recorded_nvml import load_recorded
from kvpilot.core.hardware.sampler import GpuSampler
from kvpilot.core.telemetry.live import Telemetry
from kvpilot.core.vllm.metrics import MetricsSampler, MetricsScraper

PAYLOAD = Path(__file__).resolve().parents[1] / "tests" / "data" / "metrics" / "metrics_after.txt"
GOAL_PERCENT = 1.0



def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate-hz", type=float, default=2.0)
    args = parser.parse_args()
    child, port = metrics_stub_server.start(PAYLOAD, grow_generation=True)
    try:
        url = f"http://127.0.0.1:{port}"
        tel = Telemetry()
        scraper = MetricsScraper(url, timeout_s=2.0)
        scraper.scrape()  # connection and imports warm before measuring
        metrics = MetricsSampler(
            scraper, tel.add_vllm_sample, tel.add_scrape_error, interval_s=1.0 / args.rate_hz
        )
        gpu = GpuSampler(
            rate_hz=args.rate_hz,
            nvml_module=load_recorded("rtx4090-desktop"),
            on_sample=tel.add_gpu_sample,
        )
        stop = threading.Event()
        reads = [0]

        def dashboard() -> None:
            while not stop.wait(0.2):
                for name in ("generation_tokens_per_s", "kv_usage_frac", "memory_used_bytes"):
                    tel.series(name, 600.0)
                tel.latest()
                reads[0] += 1

        proc = psutil.Process()
        reader = threading.Thread(target=dashboard, daemon=True)
        cpu0, wall0 = _cpu_s(proc), time.monotonic()
        metrics.start()
        gpu.start()
        reader.start()
        time.sleep(args.seconds)
        metrics.stop()
        gpu.stop()
        stop.set()
        reader.join()
        cpu, wall = _cpu_s(proc) - cpu0, time.monotonic() - wall0
        gpu.close()
        scraper.close()
    finally:
        child.terminate()
        child.wait(5)
    share = 100.0 * cpu / wall
    last = tel.latest()
    print(
        f"{wall:.1f} s at {args.rate_hz:g} Hz: {metrics.samples_ok} scrapes "
        f"({metrics.samples_failed} failed), {len(gpu.history())} NVML samples, "
        f"{reads[0]} dashboard reads"
    )
    print(f"  CPU time of this process   {cpu:.3f} s")
    print(f"  share of one core          {share:.2f} %")
    print(f"  per scrape + NVML sample   {cpu / max(1, metrics.samples_ok) * 1000:.2f} ms")
    print(
        f"  generation rate seen       {last['generation_tokens_per_s']:.0f} tokens/s "
        f"(served: {400 * args.rate_hz:.0f})"
    )
    ok = share < GOAL_PERCENT
    print(f"{'meets' if ok else 'MISSES'} the goal (< {GOAL_PERCENT:g} % of one core)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
