"""After one measurement: the same settings come back as measured, neighbours are calibrated
(benchmarks/calibration_neighbours.py on the public report pairs). Thresholds are what the
benchmark prints today with the released start-ups added (same 0.0 %, the 10 calibrated
neighbours worst 1.57 %, all 20 pairs worst 3.1 %: a pair with another tensor-parallel size, which
stays on the model), rounded up to the issue's goals."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from testpaths import REPO

BENCH_DIR = REPO / "benchmarks"


@pytest.fixture(scope="module")
def result():
    sys.path.insert(0, str(BENCH_DIR))
    try:
        spec = importlib.util.spec_from_file_location(
            "calibration_neighbours", BENCH_DIR / "calibration_neighbours.py"
        )
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.evaluate()
    finally:
        sys.path.remove(str(BENCH_DIR))


def test_same_settings_are_what_vllm_reported(result) -> None:
    assert result["pairs"] >= 10
    assert result["same_settings_worst_pct"] <= 0.5


def test_neighbours_are_within_two_percent_and_better_than_the_model(result) -> None:
    # pairs the offset cannot calibrate (another parallel layout) are the model's own figure,
    # held to the planner's validation goal (worst 10 %): the 4 x RTX PRO 6000 pipeline run
    # planned from its tensor-parallel sibling is 5.4 % off
    assert result["neighbour_worst_pct"] <= 10.0
    assert result["calibrated_pairs"] >= 6 and result["calibrated_worst_pct"] <= 2.0
    calibrated = [r for r in result["rows"] if r["source"] == "calibrated"]
    assert sum(abs(r["calibrated_error_pct"]) for r in calibrated) < sum(
        abs(r["model_error_pct"]) for r in calibrated
    )


def test_another_parallel_layout_is_not_calibrated(result) -> None:
    tp_rows = [r for r in result["rows"] if "tensor_parallel_size" in r["changed"]]
    assert tp_rows and all(r["source"] != "calibrated" for r in tp_rows)
