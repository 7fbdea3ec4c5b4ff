"""Run records for the tests of ``core/runs``: a load-test level and a record with plausible
figures (what a tiny model's run on the CPU engine reports), changed per test by keyword."""

from __future__ import annotations

import os

from kvpilot.core.runs.record import STOPPED, LevelSummary, RunRecord


def level(c: int, tps: float, ttft: float, jpt: float | None = None) -> LevelSummary:
    """One load-test level at concurrency ``c``: ``tps`` output tokens/s, ``ttft`` s, and
    ``jpt`` J/token (above 1: a power-capped, throttled level)."""
    return LevelSummary(concurrency=c, requests_ok=8, errors=0, output_tokens_per_s=tps,
                        requests_per_s=tps / 100, ttft_p50_s=ttft, ttft_p99_s=ttft * 2,
                        tpot_p50_s=0.02, tpot_p99_s=0.03, j_per_token=jpt,
                        throttled=jpt is not None and jpt > 1, throttle_reasons=(
                            ("power cap",) if jpt is not None and jpt > 1 else ()))


def record(run_id: str, **kw: object) -> RunRecord:
    """A stopped run of this process with a prediction and a report; ``kw`` replaces fields."""
    values: dict[str, object] = dict(
        id=run_id, started_at="2026-01-01T10:00:00Z", model="/models/tiny", state=STOPPED,
        owner_pid=os.getpid(), settings={"max_model_len": 4096, "kv_cache_dtype": "auto"},
        predicted={"kv_cache_tokens": 100_000, "max_concurrency": 24.4},
        reported={"kv_cache_tokens": 98_304, "max_concurrency": 24.0}, startup_s=42.0,
    )
    values.update(kw)
    return RunRecord(**values)  # type: ignore[arg-type]
