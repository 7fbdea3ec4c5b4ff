"""Time a full ranking over the whole catalog for one GPU (goal: under 200 ms).

    python benchmarks/recommend_speed.py [--repeat 20] [--gpus '2x RTX 4090']

Prints the catalog size, the first (cold: catalog parsed) and the median / worst warm times.
With ``--gpus`` (a planner-mode GPU list) each checkpoint is also ranked on each card and over
all of them (tensor / pipeline parallel).
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvpilot.core.base.units import MiB
from kvpilot.core.fit.recommend import Goal, recommend
from kvpilot.core.models.catalog import all_checkpoint_specs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--gpus", help="several GPUs, e.g. '2x RTX 4090'")
    args = parser.parse_args()
    gpu_set = None
    if args.gpus:
        from kvpilot.core.hardware.target import gpu_set_from_names

        gpu_set = gpu_set_from_names(args.gpus)
    from dataclasses import replace

    from kvpilot.core.hardware.target import from_spec

    gpu = replace(from_spec("RTX 4090", "linux").card(), free_bytes=22_900 * MiB)
    start = time.perf_counter()
    models = all_checkpoint_specs()
    cold_catalog_ms = (time.perf_counter() - start) * 1000
    goals = [Goal("chat", 32768, 4), Goal("long-docs", 131072, 1), Goal("batch", 4096, 32)]
    start = time.perf_counter()
    recommend(gpu, goals[0], gpu_set=gpu_set)
    first_ms = (time.perf_counter() - start) * 1000
    times = []
    for i in range(args.repeat):
        start = time.perf_counter()
        result = recommend(gpu, goals[i % len(goals)], gpu_set=gpu_set)
        times.append((time.perf_counter() - start) * 1000)
    print(f"catalog: {len(models)} checkpoints, parsed in {cold_catalog_ms:.1f} ms"
          + (f"; GPUs: {gpu_set.label}" if gpu_set else ""))
    print(f"first ranking: {first_ms:.1f} ms; warm median {statistics.median(times):.1f} ms, "
          f"worst {max(times):.1f} ms over {args.repeat} rankings (goal < 200 ms)")
    print(f"last ranking: {len(result.candidates)} candidates, {len(result.rejected)} rejected")
    return 0 if max(times) < 200 and first_ms < 200 else 1


if __name__ == "__main__":
    raise SystemExit(main())
