"""The CPU backend's KV-allocation check, as vLLM 0.32.0 CPU words it
(``v1/worker/cpu_worker.py``, ``determine_available_memory``), in its two forms:

* an explicit KV size (``--kv-cache-memory-bytes``, ``VLLM_CPU_KVCACHE_SPACE``) larger than the
  free RAM: "... less than requested memory for kv (X GiB)", reported as
  ``free_memory_below_utilization`` with ``details['requested_for'] == 'kv_cache'`` (the same
  "asked for more than is free" as the utilization check; its remedy is to ask for less);
* the KV size the utilization leaves, "... requested memory for kv (X/W GiB)" with W the
  worker's share of the RAM and X what is left of it after what the worker already holds:
  ``no_kv_memory`` when X is not positive (nothing is left for the KV cache), else
  ``free_memory_below_utilization`` (``requested_for == 'kv_cache_auto'``, X more than is free).

Not an engine death: the API server's "Worker failed with error '...'" quotes the same sentence
and is classified by it.
"""

from __future__ import annotations

import re
from typing import Any

from kvpilot.core.base import failures as fk
from kvpilot.core.base.failures import Failure
from kvpilot.core.vllm.logformats import (
    CPU32_RUN,
    FailureBuilder,
    LineFormat,
    ScanContext,
    gib_to_bytes,
)


def _cpu_kv_alloc(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    free, total, requested = m[1], m[2], m[3]
    return Failure(
        fk.FREE_MEMORY_BELOW_UTILIZATION,
        f"Only {free} of {total} GiB is free, less than the {requested} GiB asked for the KV "
        "cache; lower the KV cache size.",
        details={
            "free_bytes": gib_to_bytes(free),
            "total_bytes": gib_to_bytes(total),
            "gpu_memory_utilization": None,
            "requested_bytes": gib_to_bytes(requested),
            "requested_for": "kv_cache",
        },
    )


def _cpu_kv_auto(m: re.Match[str], msg: str, ctx: ScanContext) -> Failure:
    """The CPU backend sized the KV cache from the utilization: what the worker may use less
    what it already holds (``kv``) is not positive, or is more than the node has free."""
    free, total, kv, worker = m["free"], m["total"], m["kv"], m["worker"]
    details: dict[str, Any] = {
        "free_bytes": gib_to_bytes(free),
        "total_bytes": gib_to_bytes(total),
        "requested_bytes": gib_to_bytes(kv) if float(kv) > 0 else 0,
        "worker_requested_bytes": gib_to_bytes(worker),
        "kv_left_bytes": round(float(kv) * 2**30),
        "requested_for": "kv_cache_auto",
    }
    if float(kv) <= 0:
        return Failure(
            fk.NO_KV_MEMORY,
            f"The {worker} GiB of RAM the memory fraction gives vLLM's CPU worker are all taken "
            f"before the KV cache ({kv} GiB left for it); raise the memory fraction or use a "
            "shorter context or a smaller model.",
            details=details,
        )
    return Failure(
        fk.FREE_MEMORY_BELOW_UTILIZATION,
        f"Only {free} of {total} GiB RAM is free, less than the {kv} GiB the memory fraction "
        "asks for the KV cache; lower the memory fraction or close other programs using it.",
        details=details,
    )


def _rule(
    kind: str, since: str, before: str | None, pattern: str, build: FailureBuilder,
    example: tuple[str, str], *, note: str,
) -> LineFormat:
    return LineFormat(kind, since, before, re.compile(pattern), (example,), build=build,
                      note=note)


#: the failure rows of the CPU backend's KV-allocation check (in FAILURE_FORMATS)
CPU_KV_FORMATS: tuple[LineFormat, ...] = (
    _rule(
        fk.FREE_MEMORY_BELOW_UTILIZATION, "0.20.0", None,
        r"Available memory on node \d+ \(([\d.]+)/([\d.]+) GiB\) on kv cache allocation is "
        r"less than requested memory for kv \(([\d.]+) GiB\)",
        _cpu_kv_alloc,
        ("(Worker pid=8123) ERROR 11-29 08:21:36 [multiproc_executor.py:1063] ValueError: "
         "Available memory on node 0 (22.04/23.54 GiB) on kv cache allocation is less than "
         "requested memory for kv (100.0 GiB).", CPU32_RUN),
        note="CPU backend, explicit KV size",
    ),
    _rule(
        fk.NO_KV_MEMORY, "0.32.0", None,
        r"Available memory on node \d+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv cache "
        r"allocation is less than requested memory for kv \((?P<kv>-[\d.]+|0\.0)/"
        r"(?P<worker>[\d.]+) GiB\)",
        _cpu_kv_auto,
        ("(Worker pid=8088) ERROR 12-06 11:44:08 [multiproc_executor.py:1063] ValueError: "
         "Available memory on node 0 (18.36/23.54 GiB) on kv cache allocation is less than "
         "requested memory for kv (-0.37/0.24 GiB). Reduce CPU memory used by other processes.",
         "tests/data/vllm_logs/cpu_0.32/fail_b5_util_0.01.log (real vLLM 0.32.0 CPU run)"),
        note="CPU backend, KV size from the utilization: nothing left for it",
    ),
    _rule(
        fk.FREE_MEMORY_BELOW_UTILIZATION, "0.32.0", None,
        r"Available memory on node \d+ \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on kv cache "
        r"allocation is less than requested memory for kv \((?P<kv>[\d.]+)/"
        r"(?P<worker>[\d.]+) GiB\)",
        _cpu_kv_auto,
        ("(Worker pid=8123) ERROR 11-29 08:21:36 [multiproc_executor.py:1063] ValueError: "
         "Available memory on node 0 (2.04/23.54 GiB) on kv cache allocation is less than "
         "requested memory for kv (3.1/4.0 GiB). Reduce CPU memory used by other "
         "processes.", "composed from the vLLM 0.32.0 CPU format string "
         "(v1/worker/cpu_worker.py, determine_available_memory)"),
        note="CPU backend, KV size from the utilization: more than the node has free",
    ),
)
