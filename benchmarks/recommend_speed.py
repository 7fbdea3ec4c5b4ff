"""Time a full ranking over the whole catalog for one GPU (goal: under 200 ms).

    python benchmarks/recommend_speed.py [--repeat 20]

Prints the catalog size, the first (cold: catalog parsed) and the median / worst warm times.
"""

from __future__ import annotations

import argparse
import statistics
import time

from kvpilot.core.fit.plan import MiB
from kvpilot.core.fit.recommend import Goal, GpuTarget, recommend
from kvpilot.core.hardware import specs
from kvpilot.core.models.catalog import all_checkpoint_specs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    spec = specs.lookup(None, "RTX 4090")
    assert spec is not None
    gpu = GpuTarget(spec.name, spec.memory_total_bytes, 22_900 * MiB, spec.compute_capability,
                    spec.bandwidth_bytes_per_s, spec.bf16_dense_tflops)
    start = time.perf_counter()
    models = all_checkpoint_specs()
    cold_catalog_ms = (time.perf_counter() - start) * 1000
    goals = [Goal("chat", 32768, 4), Goal("long-docs", 131072, 1), Goal("batch", 4096, 32)]
    start = time.perf_counter()
    recommend(gpu, goals[0])
    first_ms = (time.perf_counter() - start) * 1000
    times = []
    for i in range(args.repeat):
        start = time.perf_counter()
        result = recommend(gpu, goals[i % len(goals)])
        times.append((time.perf_counter() - start) * 1000)
    print(f"catalog: {len(models)} checkpoints, parsed in {cold_catalog_ms:.1f} ms")
    print(f"first ranking: {first_ms:.1f} ms; warm median {statistics.median(times):.1f} ms, "
          f"worst {max(times):.1f} ms over {args.repeat} rankings (goal < 200 ms)")
    print(f"last ranking: {len(result.candidates)} candidates, {len(result.rejected)} rejected")
    return 0 if max(times) < 200 and first_ms < 200 else 1


if __name__ == "__main__":
    raise SystemExit(main())
