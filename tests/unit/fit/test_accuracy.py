"""The fit engine against every usable public vLLM start-up report (benchmarks/fit_accuracy.py).

The benchmark prints the per-case table; this test keeps its verdicts from regressing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "fit_accuracy.py"


def _bench():
    spec = importlib.util.spec_from_file_location("fit_accuracy", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_failure_and_success_is_predicted_as_vllm_reported():
    bench = _bench()
    rows = bench.evaluate(bench.DATA / "calibration_cases.json", bench.DATA / "architectures.json")
    evaluated = [r for r in rows if "skipped" not in r]
    assert len(evaluated) >= 15
    assert all(r["fit_matches"] for r in evaluated), [
        (r["case"], r["expected_failure"], r["predicted_failure"]) for r in evaluated
        if not r["fit_matches"]
    ]
    summary = bench.summarize(rows)
    assert summary["kv_median_abs_error_pct"] <= 2.0
    assert summary["kv_worst_abs_error_pct"] <= 8.0
