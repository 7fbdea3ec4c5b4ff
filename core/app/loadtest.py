"""A load test that is kept with the run it measured: the one call ``kvpilot bench`` and the
window's load-test dialog make (the load test of :mod:`kvpilot.core.vllm.client`, the GPU's
energy sampled by :mod:`kvpilot.core.hardware`, the run records of :mod:`kvpilot.core.runs`).

:func:`run_recorded_load_test` runs :func:`~kvpilot.core.vllm.client.run_load_test` and adds
its summary (tokens/s, TTFT/TPOT percentiles, J/token and throttling per level) to the running
run record of this data directory that serves at the test's URL; a server kvpilot did not start
(an attached one, a remote one) has no record, and the test is only returned. Both faces build
what to send with :func:`load_test_config`, checked before anything runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvpilot.core.hardware.energy import GpuEnergy, throttle_note
from kvpilot.core.runs.record import RunRecord, summary_of_report
from kvpilot.core.runs.store import RunStore, utc_now
from kvpilot.core.vllm.client import (
    LoadTestConfig,
    LoadTestProgress,
    LoadTestReport,
    gpu_line,
    run_load_test,
)

log = logging.getLogger("kvpilot.runs")  # the run records' log, where it always wrote


def load_test_config(base_url: str, **settings: Any) -> LoadTestConfig:  # noqa: ANN401 - fields
    """What the load test sends to ``base_url`` (``settings``: the other fields of
    :class:`~kvpilot.core.vllm.client.LoadTestConfig`, seconds and tokens), checked.

    Raises:
        LoadTestError: the first bad setting (levels, sizes, times, API or key), in words.
        TypeError: a setting the load test does not have.
    """
    config = LoadTestConfig(base_url=base_url, **settings)
    config.validate()
    return config


@dataclass(frozen=True)
class LevelGpuWords:
    """One level's GPU figures in words: ``cells`` the J/token, mean watts and throttle columns
    ("-" without GPU samples), ``line`` all of them in one line ("" without samples) and
    ``throttled`` whether a clock-event reason slowed the card during the level."""

    cells: tuple[str, str, str]
    line: str
    throttled: bool


@dataclass(frozen=True)
class ReportGpuWords:
    """A report's GPU figures in words: one :class:`LevelGpuWords` per level, in order, and
    ``throttle_note`` (one sentence naming the levels a hot card slowed, None when none did)."""

    levels: tuple[LevelGpuWords, ...]
    throttle_note: str | None


def level_gpu_words(gpu: GpuEnergy | None) -> LevelGpuWords:
    """The words of one level's GPU figures (``gpu`` None: no samples)."""
    if gpu is None:
        return LevelGpuWords(("-", "-", "-"), "", False)
    per_token = "-" if gpu.j_per_token is None else f"{gpu.j_per_token:.3g}"
    if gpu.throttled is None:
        throttled = "-"
    elif gpu.throttled:
        throttled = ", ".join(gpu.throttle_reasons) or "yes"
    else:
        throttled = "no"
    return LevelGpuWords((per_token, f"{gpu.mean_power_w:.0f}", throttled), gpu_line(gpu),
                         bool(gpu.throttled))


def report_gpu_words(report: LoadTestReport) -> ReportGpuWords:
    """The words of ``report``'s GPU figures, level by level, and its throttle sentence."""
    return ReportGpuWords(tuple(level_gpu_words(lv.gpu) for lv in report.levels),
                          throttle_note(report.levels))


def record_load_test(data_dir: Path, report: LoadTestReport, source: str) -> RunRecord | None:
    """Add ``report`` to the running record served at its URL; the updated record, or None
    when no run of ``data_dir`` serves there (never raises for a record problem)."""
    try:
        return RunStore(data_dir).add_load_test(
            report.base_url, summary_of_report(report, utc_now(), source)
        )
    except Exception:  # keeping the record must not lose the test's result
        log.exception("the load test was not added to its run record")
        return None


def run_recorded_load_test(
    config: LoadTestConfig,
    on_progress: Callable[[LoadTestProgress], None] | None = None,
    cancel_event: threading.Event | None = None,
    *,
    data_dir: Path,
    gpu_index: int | None = 0,
    nvml_module: object | None = None,
    source: str = "cli",
) -> LoadTestReport:
    """Run the load test (blocking) and keep it with its run; see the module docstring.

    Unless the target is remote (``config.allow_remote``) or ``gpu_index`` is None, GPU
    ``gpu_index`` is sampled at 10 Hz for the test (``nvml_module`` replaces NVML: a recorded
    GPU's replay), so that every level, however short, has its energy, J/token and throttling.

    Raises:
        LoadTestError: as :func:`~kvpilot.core.vllm.client.run_load_test`.
    """
    from kvpilot.core.hardware.sampler import start_run_sampler

    sampler = None
    if not config.allow_remote and gpu_index is not None:
        # a level lasts at most its duration plus one request's limit: keep that much
        sampler = start_run_sampler(config.duration_s + config.request_timeout_s + 30.0,
                                    index=gpu_index, nvml_module=nvml_module)
    try:
        report = run_load_test(config, on_progress, cancel_event,
                               None if sampler is None else sampler.history)
    finally:
        if sampler is not None:
            sampler.stop()
    record_load_test(data_dir, report, source)
    return report
