"""The CPU backend's KV-allocation check in both its wordings (core/vllm/cpu_kv_failures.py):
a memory failure with its figures, never an engine death."""

from __future__ import annotations

from testpaths import DATA

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.units import GiB
from kvpilot.core.vllm.logparse import LogScanner

CPU = DATA / "vllm_logs" / "cpu_0.32"


def _classified(line: str, version: str = "0.32.0+cpu") -> Failure:
    scanner = LogScanner(version=version)
    scanner.feed(line)
    assert scanner.failure is not None, line
    return scanner.failure


def test_the_cpu_builds_kv_allocation_wording_is_a_memory_failure() -> None:
    """vLLM 0.32.0 CPU's auto-sized KV check (v1/worker/cpu_worker.py): nothing left for the
    KV cache is no_kv_memory; more asked than the node has free is a free-memory refusal."""
    nothing = _classified(
        "(Worker pid=8123) ERROR 11-29 08:21:36 [multiproc_executor.py:1063] ValueError: "
        "Available memory on node 0 (22.04/23.54 GiB) on kv cache allocation is less than "
        "requested memory for kv (-0.37/1.18 GiB). Reduce CPU memory used by other processes.",
        "0.32.0+cpu")
    assert nothing.kind == failures.NO_KV_MEMORY
    wrapped = _classified(
        "(EngineCore pid=8034) ERROR 11-29 08:21:36 [core.py:1510] RuntimeError: Worker failed "
        "with error 'Available memory on node 0 (2.04/23.54 GiB) on kv cache allocation is less "
        "than requested memory for kv (3.1/4.0 GiB). Reduce CPU memory used by other "
        "processes.', please check the stack trace above for the root cause", "0.32.0+cpu")
    assert wrapped.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    assert wrapped.details["free_bytes"] == round(2.04 * GiB)
    assert failures.ENGINE_DIED not in (nothing.kind, wrapped.kind)


def test_the_recorded_run_names_the_workers_share_and_what_it_held() -> None:
    """The real run at utilization 0.01: the worker's 0.24 GiB share, 0.37 GiB short of what
    it held before its KV cache; the API server's "Worker failed with error" line after it
    does not turn it into an engine death."""
    scanner = LogScanner(version="0.32.0+cpu")
    for line in (CPU / "fail_b5_util_0.01.log").read_text(encoding="utf-8").splitlines():
        scanner.feed(line)
    failure = scanner.failure
    assert failure is not None and failure.kind == failures.NO_KV_MEMORY
    assert failure.details["requested_for"] == "kv_cache_auto"
    assert failure.details["worker_requested_bytes"] == round(0.24 * GiB)
    assert failure.details["kv_left_bytes"] == round(-0.37 * GiB)
    assert failure.details["free_bytes"] == round(18.36 * GiB)


def test_an_explicit_kv_size_above_the_free_ram_keeps_its_kind() -> None:
    scanner = LogScanner(version="0.32.0+cpu")
    for line in (CPU / "fail_b3_kvspace_100.log").read_text(encoding="utf-8").splitlines():
        scanner.feed(line)
    assert scanner.failure is not None
    assert scanner.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    assert scanner.failure.details["requested_for"] == "kv_cache"
