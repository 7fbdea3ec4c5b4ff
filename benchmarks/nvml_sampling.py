"""Cost of GPU sampling: microseconds per sample and CPU share of one core at 10 Hz.

Runs against the snapshot replay (always) and the real NVML library (when a driver answers).
Each sample reads memory, utilization, temperature, power draw and limit, clocks, the
clock-event (throttle) mask, the energy counter and the process lists; the replay also says
how many NVML calls one sample makes. Goal: under 1 % of one core at 10 Hz.

    .venv/bin/python benchmarks/nvml_sampling.py [--duration 10] [--rate 10] [--samples 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvpilot.core.hardware.nvml import Nvml, NvmlInitError, import_pynvml
from kvpilot.core.hardware.recorded_nvml import RecordedNvml, load_recorded
from kvpilot.core.hardware.sampler import GpuSampler


def cost_per_sample(module: object, samples: int) -> tuple[float, float, float]:
    """(median wall µs, p99 wall µs, CPU µs per sample) of ``sample_once`` in a loop."""
    sampler = GpuSampler(nvml_module=module)
    sampler.sample_once()  # open the session outside the measurement
    walls: list[float] = []
    cpu0 = time.process_time()
    for _ in range(samples):
        t0 = time.perf_counter()
        sample = sampler.sample_once()
        walls.append(time.perf_counter() - t0)
        if not sample.ok:
            raise SystemExit(f"sampling failed: {sample.error}")
    cpu = time.process_time() - cpu0
    sampler.close()
    walls.sort()
    return (
        statistics.median(walls) * 1e6,
        walls[int(len(walls) * 0.99) - 1] * 1e6,
        cpu / samples * 1e6,
    )


def cpu_share(module: object, rate_hz: float, duration_s: float) -> tuple[float, int]:
    """(percent of one core, samples taken) for a running sampler; the caller thread sleeps."""
    sampler = GpuSampler(rate_hz=rate_hz, nvml_module=module)
    cpu0, wall0 = time.process_time(), time.monotonic()
    sampler.start()
    time.sleep(duration_s)
    sampler.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return cpu / wall * 100.0, len(sampler.history())


def calls_per_sample(module: object) -> int | None:
    """NVML calls one sample makes, counted by the replay (None for the real library)."""
    if not isinstance(module, RecordedNvml):
        return None
    sampler = GpuSampler(nvml_module=module)
    sampler.sample_once()
    before = module.call_count
    sample = sampler.sample_once()
    calls = module.call_count - before
    sampler.close()
    if sample.throttle_reasons_mask is None or sample.energy_mj is None:
        print("  (this snapshot records no throttle mask or energy counter)")
    return calls


def report(label: str, module: object, args: argparse.Namespace) -> None:
    calls = calls_per_sample(module)
    median_us, p99_us, cpu_us = cost_per_sample(module, args.samples)
    share, taken = cpu_share(module, args.rate, args.duration)
    verdict = "ok" if share < 1.0 else "OVER GOAL"
    print(f"{label}")
    if calls is not None:
        print(f"  NVML calls per sample  {calls}")
    print(
        f"  cost per sample   median {median_us:8.1f} µs wall, p99 {p99_us:8.1f} µs, "
        f"{cpu_us:8.1f} µs CPU  ({args.samples} samples)"
    )
    print(
        f"  at {args.rate:g} Hz for {args.duration:g} s  {share:6.3f} % of one core "
        f"({taken} samples, {share / 100 / args.rate * 1e6:.0f} µs CPU per tick incl. thread "
        f"wake-up)  goal < 1 %: {verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds at the rate")
    parser.add_argument("--rate", type=float, default=10.0, help="samples per second")
    parser.add_argument("--samples", type=int, default=2000, help="samples for the cost loop")
    parser.add_argument("--snapshot", default="rtx4090-desktop", help="replayed snapshot")
    args = parser.parse_args()

    report(f"replay of {args.snapshot}", load_recorded(args.snapshot), args)
    try:
        real = import_pynvml()
        with Nvml(real) as nv:
            count = nv.device_count()
            name = nv.call("nvmlDeviceGetName", nv.handle(0)) if count else None
    except NvmlInitError as exc:
        print(f"real NVML: not measured ({exc.problem.message})")
        return
    if not count:
        print("real NVML: not measured (no GPU)")
        return
    report(f"real NVML, GPU 0 {name}", real, args)


if __name__ == "__main__":
    main()
