"""Validation of the fit engine on the public vLLM start-up reports (benchmarks/fit_accuracy.py).

The benchmark prints the per-case table; these tests keep its validation verdicts and errors
from regressing. Thresholds are the validation error the benchmark prints today rounded up, not a
fit to the cases: leave-one-source-out median 0.79 % / worst 9.49 %, leave-one-release-out
0.94 % / 9.49 % of available KV on the 40 started runs with logged weights (the rule of thumb:
5.16 % / 240.87 %); leave-one-out median 1.02 % on the 34 known-version cases.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from testpaths import REPO, load_script

from kvpilot.core.fit import activation
from kvpilot.core.fit.budget import compute_capacity

BENCH = REPO / "benchmarks" / "fit_accuracy.py"

#: validation thresholds (known-version cases), from the benchmark's leave-one-out output (1.34 %
#: with the 4 x RTX PRO 6000 runs tuning the constants and the pipeline runs replayed; the goal
#: is 2.5 %)
MEDIAN_KV_ERROR_PCT = 1.5
#: per split, over the started runs that log their weights (the rule of thumb's cases): 0.99 %
#: leave-one-source-out, 1.44 % leave-one-release-out
SPLIT_MEDIAN_KV_ERROR_PCT = 1.5
SPLIT_WORST_KV_ERROR_PCT = 9.5


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH, "fit_accuracy")


@pytest.fixture(scope="module")
def rows(bench):
    return bench.evaluate()


@pytest.fixture(scope="module")
def splits(bench):
    return bench.evaluate_splits()


def test_validation_meets_the_accuracy_goals(bench, rows):
    summary = bench.summarize(rows)
    assert summary["mode"] == "leave-one-out validation"
    assert summary["cases"] >= 12  # known-version cases validated
    assert summary["kv_median_abs_error_pct"] <= MEDIAN_KV_ERROR_PCT
    assert summary["started_called_does_not_fit"] == 0
    # unknown-version cases are reported apart and still never called "does not fit" wrongly
    assert summary["unknown_version"]["started_called_does_not_fit"] == 0
    assert set(summary["per_row"]) >= {"0", "0.8", "0.10.2", "0.20", "0.28"}


def test_both_splits_beat_the_rule_of_thumb(bench, splits):
    summary = bench.summarize_splits(splits)
    assert set(summary) == {"leave-one-source-out", "leave-one-release-out"}
    for split, st in summary.items():
        k, rule = st["kvpilot"], st["rule_of_thumb"]
        assert st["with_logged_weights"] >= 30, split
        assert k["median_pct"] <= SPLIT_MEDIAN_KV_ERROR_PCT, split
        assert k["worst_pct"] <= SPLIT_WORST_KV_ERROR_PCT, split
        assert k["median_pct"] < rule["median_pct"] and k["worst_pct"] < rule["worst_pct"], split
        assert st["started_called_does_not_fit"] == 0, split
        border, started = (int(x) for x in st["started_called_borderline"].split("/"))
        assert border * 5 <= started, split
        # every group (source / release) carries the rule of thumb beside it
        assert all("rule_of_thumb" in g for g in st["per_group"].values())
    assert summary["leave-one-source-out"]["groups"] > summary["leave-one-release-out"]["groups"]


def test_graphs_captured_through_nccl_keep_the_a10_failure_from_fits(bench, splits):
    # vLLM issue 17469: 0.8.5 over four A10 sized its KV cache, then ran out of memory
    # capturing the graphs through NCCL; the 1.7 GiB beyond the budget is inside the published
    # range of that memory, so both splits call it borderline, as they do the L40S x 8 run whose
    # graphs took 3.45 of the 3.94 GiB beyond its budget (it started)
    for split, rows in splits.items():
        by_case = {r["case"]: r for r in rows}
        a10 = by_case["vllm17469-a10x4-qwen3-30b-a3b-tp4"]
        assert not a10["started"] and a10["verdict"] == "borderline", split
        assert a10["failure_flagged"], split
        assert by_case["l40s-x8-qwen3-235b-2507-fp8-tp8"]["verdict"] == "borderline", split
    summary = bench.summarize_splits(splits)
    for split, st in summary.items():
        assert st["failures_flagged"] == "7/7", split
        assert st["started_called_borderline"] == "6/46", split


def test_the_wsl2_failure_is_borderline_and_the_wsl2_runs_that_started_fit(bench, splits):
    # 0.15.1 at utilization 0.92 on a WSL2 RTX 4090 had 0.14 GiB of KV cache where the plan has
    # 2.47 GiB: the display server's 2,275 MiB came out of it while vLLM loaded. The band's
    # lower edge allows 1 GiB of such memory under WSL2, below the 1.0 GiB one 4,096-token
    # request needs; the two 0.27.1 WSL2 start-ups keep their verdict
    for split, rows in splits.items():
        by_case = {r["case"]: r for r in rows}
        failed = by_case["rtx4090-wsl2-qwen25-coder-32b-awq-4096-FAIL"]
        assert failed["verdict"] == "borderline" and failed["failure_flagged"], split
        low, high = failed["band_gib"]
        assert low < 1.0 < high, split
        for started in ("rtx4090-wsl2-qwen25-0.5b-2048-u0.85", "rtx4090-wsl2-qwen25-0.5b-u0.92"):
            assert by_case[started]["verdict"] == "fits", split


def test_the_rule_of_thumb_is_requested_minus_logged_weights_and_1_5_gib(bench, splits):
    row = next(r for r in splits["leave-one-source-out"]
               if r["case"] == "a100-80-llama31-8b-131k-v0310-default")
    # 79.25 GiB x 0.92 - (15.0 GiB logged + 1.5 GiB) (the case's own log)
    assert row["rule_kv_gib"] == pytest.approx(79.25 * 0.92 - 15.0 - 1.5, abs=0.002)
    assert row["rule_kv_error_pct"] == pytest.approx(
        (row["rule_kv_gib"] - 56.21) / 56.21 * 100, abs=0.01)


def test_a_split_never_fits_on_the_group_it_predicts(bench):
    cases, _ = bench.load_cases(bench.CASE_FILES)
    known = [c for c in cases if c.known]
    for attr in ("source", "release"):
        target = next(c for c in known if c.case_id == "l40s-qwen3-14b-awq-40k-default-v0280")
        group = {c.case_id for c in known if getattr(c, attr) == getattr(target, attr)}
        assert len(group) >= 3  # the L40S write-up's three 0.28.0 start-ups
        key = getattr(target, attr)
        fitted = bench.fit_constants([c for c in known if getattr(c, attr) != key])
        used = {case for ids in fitted.fitted_on.values() for case in ids}
        assert used and not used & group


def test_dropped_constants_do_not_help_on_the_splits(bench):
    """Each constant left at its prior earns no place: the pooled split figures without the
    dropped constants are no worse than with every constant fitted."""
    data = json.loads(bench.CONSTANTS_PATH.read_text())["constants"]
    assert data["activation_residual_units"] == {} and data["activation_residual_bytes"] == {}
    assert data["fitted_on"]["non_torch_single_gpu_bytes"] == []
    def pooled(drop):
        rows = [r for split in bench.evaluate_splits(drop=drop).values() for r in split]
        return bench.split_stats(rows)["kvpilot"]
    every, kept = pooled(frozenset()), pooled(bench.DROPPED)
    assert kept["median_pct"] <= every["median_pct"]
    assert kept["worst_pct"] <= every["worst_pct"]


def test_released_cases_keep_their_sources_and_versions(bench):
    cases = json.loads((bench.DATA / "calibration_cases_released.json").read_text())
    assert len(cases) == 33
    for case in cases:
        assert case["source_url"] or case["source_locator"], case["case_id"]
        assert bench.source_of(case)
    by_id = {c["case_id"]: c for c in cases}
    assert bench._version_of(by_id["l4-qwen35-4b-32k-u0.92"]) == "0.29.0"
    assert bench._version_of(by_id["vllmpr10511-h100-llama3-8b"]) == bench.UNKNOWN
    assert bench.release_of("0.28.1") == "0.28"
    # the six cases of one French write-up are one source
    french = {bench.source_of(c) for c in cases if (c["case_id"].startswith("l4-")
              and "gemma4" in c["case_id"]) or c["case_id"].startswith("l4-qwen25")}
    assert len(french) == 1


def test_every_case_states_its_vllm_version():
    for name in ("calibration_cases.json", "calibration_cases_more.json",
                 "calibration_cases_2026.json"):
        for case in json.loads((BENCH.parent / "data" / name).read_text()):
            assert case["vllm_version"], case["case_id"]
            if case["vllm_version"] == "unknown":
                assert case.get("vllm_version_note"), case["case_id"]


def test_unknown_versions_never_tune_a_constant(bench):
    cases, _ = bench.load_cases(bench.CASE_FILES)
    unknown = {c.case_id for c in cases if not c.known}
    assert unknown  # the llm-d and issue-10517 logs
    fitted = bench.fit_constants(cases)
    used = {case for ids in fitted.fitted_on.values() for case in ids}
    assert used and not used & unknown


def test_leave_one_out_never_uses_the_case_it_predicts(bench):
    cases, _ = bench.load_cases(bench.CASE_FILES)
    known = [c for c in cases if c.known]
    target = next(c for c in known if c.case_id == "rtx4080-16g-qwen25-7b-awq-32k")
    others = [c for c in known if c is not target]
    loo = bench.fit_constants(others)
    assert all(target.case_id not in ids for ids in loo.fitted_on.values())
    # the case's own logged numbers do not move its validation prediction ...
    doctored = dataclasses.replace(target, reported_activation_gib=5.0, reported_graph_gib=3.0,
                                   reported_non_torch_gib=2.0)
    again = bench.fit_constants(others)
    assert compute_capacity(doctored.inputs, constants=again).available_kv_bytes == (
        compute_capacity(target.inputs, constants=loo).available_kv_bytes
    )
    # ... but they would move a fit that saw them (so the test above can fail)
    seen = bench.fit_constants([*others, doctored])
    assert compute_capacity(target.inputs, constants=seen).available_kv_bytes != (
        compute_capacity(target.inputs, constants=loo).available_kv_bytes
    )


def test_stored_constants_and_band_match_the_benchmark(bench, splits):
    data = json.loads(bench.CONSTANTS_PATH.read_text())
    rows = [r for split in splits.values() for r in split]
    band = bench.validation_band(rows)
    assert data["validation"]["half_width_fraction"] == band["half_width_fraction"]
    cases, _ = bench.load_cases(bench.CASE_FILES)
    full = bench.fit_constants([c for c in cases if c.known], drop=bench.DROPPED)
    assert activation.FITTED.non_torch_single_gpu_bytes == full.non_torch_single_gpu_bytes
    assert activation.FITTED.cudagraph_bytes_per_layer_hidden_token == pytest.approx(
        full.cudagraph_bytes_per_layer_hidden_token)
    # every row's band is at least the validation error of its cases
    for r in rows:
        if r["known"] and "kv_error_gib" in r and r["expected_failure"] is None:
            if r["weights_from_config"]:
                # planned with the byte model's weight size: the plan's own band (row band plus
                # the weight estimate's uncertainty) holds what vLLM reported
                low, high = r["band_gib"]
                assert low <= r["reported_kv_gib"] <= high, r["case"]
                continue
            key = r["row"] + ("/tp" if r["tensor_parallel_size"] > 1 else "")
            share = data["validation"]["half_width_fraction"][key]
            # the band is a share of the budget: on each case's own budget it holds the error
            assert share * r["requested_gib"] >= abs(r["kv_error_gib"]) - 0.001, r["case"]


def test_2026_start_ups_are_reported_apart(bench, rows):
    recent = bench.summarize(rows)["recent"]
    assert recent["since"] == "0.20.0"
    assert recent["known_weights"]["cases"] >= 4
    assert recent["weights_from_config_only"]["cases"] >= 1  # Qwen3-VL-30B-A3B FP8
    assert recent["config_weights_cases"] >= 4
    # the goals for this year's start-ups (validation, not fit)
    assert recent["known_weights"]["kv_median_abs_error_pct"] <= 2
    assert recent["known_weights"]["kv_worst_abs_error_pct"] <= 14.5
    assert recent["config_weights_worst_abs_error_pct"] <= 3


def test_a_case_that_sets_the_runner_variable_is_planned_on_that_runner(bench):
    assert bench.v2_runner_env({"other_flags": "VLLM_USE_V2_MODEL_RUNNER=0 vllm serve m"}) is False
    assert bench.v2_runner_env({"other_flags": "VLLM_USE_V2_MODEL_RUNNER=1"}) is True
    assert bench.v2_runner_env({"other_flags": "--enforce-eager"}) is None
    assert bench.v2_runner_env({"other_flags": None}) is None
    cases, _ = bench.load_cases(bench.CASE_FILES)
    b300 = next(c for c in cases if c.case_id == "b300-gemma4-31b-it-bf16-16k-u0.92-v0260")
    assert b300.inputs.use_v2_model_runner is False
    assert compute_capacity(b300.inputs).inputs["model_runner"] == "V1"
