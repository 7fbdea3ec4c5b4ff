"""The scanner's table of line formats: every recorded line reads through its own rule.

Each row of :data:`CAPACITY_FORMATS` (``logformats``) / :data:`FAILURE_FORMATS` (``logfailures``)
names the vLLM releases that print the wording and the recorded lines that prove it; here every
example is fed to a fresh scanner and must give that row's figures (capacity) or kind (failure),
and the ranges must agree with the supported range the planner uses.
"""

from __future__ import annotations

import pytest
from testpaths import REPO

from kvpilot.core.base import failures as fk
from kvpilot.core.base import versions
from kvpilot.core.base.failures import Failure
from kvpilot.core.fit import fallback
from kvpilot.core.vllm.logevents import CapacityEvent
from kvpilot.core.vllm.logfailures import FAILURE_FORMATS
from kvpilot.core.vllm.logformats import CAPACITY_FORMATS, LineFormat, parse_line
from kvpilot.core.vllm.logparse import LogScanner, classify_exit

CAP_EXAMPLES = [
    pytest.param(row, line, id=f"{row.what}-{i}")
    for row in CAPACITY_FORMATS
    for i, (line, _where) in enumerate(row.examples)
]
FAIL_EXAMPLES = [
    pytest.param(row, line, id=f"{row.what}-{row.since}-{i}")
    for row in FAILURE_FORMATS
    for i, (line, _where) in enumerate(row.examples)
]


def test_every_row_has_a_recorded_line_and_a_range() -> None:
    for row in (*CAPACITY_FORMATS, *FAILURE_FORMATS):
        assert row.examples, row.what
        assert all(where for _, where in row.examples), row.what
        assert (row.read is None) != (row.build is None), row.what
        assert versions.release(row.since) is not None
        assert row.before is None or versions.release(row.before) > versions.release(row.since)
        assert row.releases.startswith(versions.short(row.since))


@pytest.mark.parametrize(("row", "line"), CAP_EXAMPLES)
def test_capacity_example_reads_through_its_rule(row: LineFormat, line: str) -> None:
    match = row.pattern.search(parse_line(line).message)
    assert match is not None, f"{row.what} does not match its own example"
    assert row.read is not None
    expected = row.read(match)
    assert expected
    scanner = LogScanner()
    read = [e for e in scanner.feed(line) if isinstance(e, CapacityEvent)]
    assert read, f"the scanner reads nothing from {line!r}"
    figures = read[0].figures()
    for key, value in expected.items():
        assert figures[key] == value, (row.what, key)


@pytest.mark.parametrize(("row", "line"), FAIL_EXAMPLES)
def test_failure_example_reads_through_its_rule(row: LineFormat, line: str) -> None:
    assert row.pattern.search(parse_line(line).message), row.what
    scanner = LogScanner()
    for before in row.context:
        scanner.feed(before)
    found = [e for e in scanner.feed(line) if isinstance(e, Failure)]
    assert found and found[0].kind == row.what, (row.what, found)
    assert found[0].message


def test_the_fallback_kinds_all_have_a_wording() -> None:
    kinds = {row.what for row in FAILURE_FORMATS}
    answered = {
        fk.KV_CACHE_TOO_SMALL, fk.NO_KV_MEMORY, fk.NEGATIVE_KV_BUDGET,
        fk.FREE_MEMORY_BELOW_UTILIZATION, fk.CUDA_OOM_LOADING, fk.CUDA_OOM_GRAPHS,
        fk.UNSUPPORTED_KV_DTYPE, fk.UNSUPPORTED_QUANTIZATION, fk.MAX_MODEL_LEN_ABOVE_MODEL,
    }
    assert answered <= kinds
    assert answered <= set(fallback.ANSWERED_KINDS)


def test_the_summary_terms_have_a_wording_in_every_supported_release() -> None:
    """Weights, KV budget, KV tokens and concurrency are read in every release of the range."""
    needed = {
        "weights_bytes": ("weights_loaded",),
        "available_kv_bytes": ("available_kv", "v0_available_kv", "v0_profiling_results"),
        "max_concurrency": ("max_concurrency",),
    }
    for release in ("0.6.6", "0.7.3", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.16.0", "0.20.2",
                    "0.28.0", "0.33.0", "0.40.0"):
        rows = {row.what for row in CAPACITY_FORMATS if row.applies_to(release)}
        for figure, names in needed.items():
            assert rows & set(names), (release, figure)


def test_old_and_new_wordings_do_not_overlap() -> None:
    by_name: dict[str, list[LineFormat]] = {}
    for row in CAPACITY_FORMATS:
        by_name.setdefault(row.what, []).append(row)
    weights = by_name["weights_loaded"]
    assert [r.applies_to("0.7.3") for r in weights] == [True, False]
    assert [r.applies_to("0.8.5") for r in weights] == [False, True]
    assert [r.applies_to("0.99.0") for r in weights] == [False, True]  # newer: newest formats
    assert by_name["summary_weights"][0].releases == "0.10.2 - 0.27"
    assert by_name["summary_consumed"][0].releases == "0.28 -"
    assert by_name["v0_profiling_results"][0].releases == "0.6.4 - before 0.6.6"


def test_graph_capture_oom_of_recent_releases() -> None:
    scanner = LogScanner(version="0.33.0")
    lines = [
        "(EngineCore pid=4188) INFO 11-29 10:05:22 [model_runner.py:429] Model loading took "
        "14.99 GiB memory and 6.412345 seconds",
        "Capturing CUDA graphs (PIECEWISE): 100%|██████████| 67/67 [00:03<00:00, 21.30it/s]",
        "Capturing CUDA graphs (FULL):  57%|█████▋    | 20/35 [00:02<00:01,  9.10it/s]",
        "[rank0] memory allocation failed with OOM on device 0 while trying to allocate 2097152 "
        "bytes (free: 2031616, total: 23661248512)",
        "(EngineCore pid=4188) ERROR 11-29 10:05:49 [core.py:1584] EngineCore failed to start.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': 1}",
    ]
    for line in lines:
        scanner.feed(line)
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None and failure.kind == fk.CUDA_OOM_GRAPHS
    assert failure.details["tried_to_allocate_bytes"] == 2_097_152
    assert failure.details["device_free_bytes"] == 2_031_616
    assert failure.details["device_total_bytes"] == 23_661_248_512
    assert (failure.details["cudagraph_mode"], failure.details["graphs_captured"],
            failure.details["graphs_total"]) == ("FULL", 20, 35)
    assert "FULL, 20 of 35" in failure.message


def test_negative_budget_is_its_own_kind_and_keeps_the_number() -> None:
    scanner = LogScanner(version="0.16.1")
    lines = [
        "(APIServer pid=1) INFO 03-09 12:55:01 [utils.py:233] non-default args: {'model': "
        "'/models/q', 'max_model_len': 16384, 'gpu_memory_utilization': 0.3}",
        "(EngineCore_DP0 pid=2) INFO 03-09 12:56:30 [gpu_model_runner.py:2602] Model loading "
        "took 3.85 GiB memory and 80.081264 seconds",
        "(EngineCore_DP0 pid=2) INFO 03-09 12:56:44 [gpu_worker.py:424] Available KV cache "
        "memory: -8.59 GiB",
        "(EngineCore_DP0 pid=2) ERROR 03-09 12:56:44 [core.py:1100] ValueError: No available "
        "memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
        "the engine.",
    ]
    for line in lines:
        scanner.feed(line)
    failure = scanner.failure
    assert failure is not None and failure.kind == fk.NEGATIVE_KV_BUDGET
    assert failure.details["available_kv_bytes"] == round(-8.59 * (1 << 30))
    assert failure.details["gpu_memory_utilization"] == 0.3
    assert failure.details["weights_bytes"] == round(3.85 * (1 << 30))
    assert "-8.59 GiB" in failure.message and "0.3" in failure.message
    assert scanner.capacity.available_kv_bytes == round(-8.59 * (1 << 30))


def test_old_wording_of_kv_too_small_gives_the_shorter_context() -> None:
    scanner = LogScanner(version="0.6.4")
    scanner.feed(
        "ERROR 11-20 10:00:00 [engine.py:366] ValueError: The model's max seq len (29000) is "
        "larger than the maximum number of tokens that can be stored in KV cache (23648). Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."
    )
    failure = scanner.failure
    assert failure is not None and failure.kind == fk.KV_CACHE_TOO_SMALL
    assert failure.estimated_max_model_len == 23648
    assert failure.details["max_model_len"] == 29000


def test_a_newer_release_tries_the_newest_formats() -> None:
    scanner = LogScanner(version="0.41.0")
    events = scanner.feed(
        "(EngineCore pid=7) INFO 02-01 09:00:00 [kv_cache_utils.py:1200] GPU KV cache size: "
        "75,824 tokens, Maximum concurrency for 40,960 tokens per request: 1.85x"
    )
    cap = next(e for e in events if isinstance(e, CapacityEvent))
    assert (cap.kv_cache_tokens, cap.max_concurrency, cap.max_concurrency_at_len) == (
        75_824, 1.85, 40_960)


def test_an_unrecognised_failure_shows_vllms_own_last_error_line() -> None:
    scanner = LogScanner(version="0.41.0")
    for line in (
        "(EngineCore pid=7) INFO 02-01 09:00:00 [core.py:90] Initializing a V1 LLM engine "
        "(v0.41.0) with config: model='/m'",
        "(EngineCore pid=7) ERROR 02-01 09:00:05 [core.py:1600] EngineCore failed to start.",
        "(EngineCore pid=7) ERROR 02-01 09:00:05 [core.py:1600] Traceback (most recent call "
        "last):",
        "(EngineCore pid=7) ERROR 02-01 09:00:05 [core.py:1600] vllm.v1.errors.PlannerError: "
        "the fused MoE planner needs 3 GiB of scratch space",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': 1}",
    ):
        scanner.feed(line)
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None and failure.kind == fk.UNKNOWN
    assert "PlannerError: the fused MoE planner needs 3 GiB of scratch space" in failure.message


def test_an_unrecognised_error_without_a_traceback_is_not_blank() -> None:
    scanner = LogScanner(version="0.41.0")
    for line in (
        "(EngineCore pid=7) ERROR 02-01 09:00:05 [worker.py:77] rank 0 could not pin its "
        "memory pool (cudaErrorNotPermitted)",
        "(APIServer pid=6) INFO 02-01 09:00:06 [launcher.py:90] Shutting down the API server",
    ):
        scanner.feed(line)
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None and failure.kind == fk.UNKNOWN
    assert "rank 0 could not pin its memory pool (cudaErrorNotPermitted)" in failure.message


def test_the_0_6_line_prefix_is_split_like_the_later_ones() -> None:
    old = parse_line("ERROR 11-20 10:00:00 engine.py:366] RuntimeError: pinned memory ran out")
    assert (old.level, old.file, old.message) == (
        "ERROR", "engine.py", "RuntimeError: pinned memory ran out")
    new = parse_line("INFO 11-29 08:10:34 [gpu_worker.py:773] Available KV cache memory: 4.72 GiB")
    assert (new.level, new.file, new.message) == (
        "INFO", "gpu_worker.py", "Available KV cache memory: 4.72 GiB")
    scanner = LogScanner(version="0.6.4")
    scanner.feed("ERROR 11-20 10:00:00 engine.py:366] RuntimeError: pinned memory ran out")
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None and "RuntimeError: pinned memory ran out" in failure.message


def test_the_published_table_matches_the_code() -> None:

    from kvpilot.core.vllm.logparse import formats_table

    page = REPO / "docs" / "vllm-log-formats.md"
    text = page.read_text(encoding="utf-8")
    assert formats_table() in text, "regenerate docs/vllm-log-formats.md from formats_table()"
    assert versions.support_summary() in text


def test_the_cause_printed_after_engine_init_failed_is_still_quoted() -> None:
    """stderr's "Engine core initialization failed" can be read before stdout's traceback."""
    scanner = LogScanner(version="0.41.0")
    events = scanner.feed(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {'EngineCore': 1}"
    )
    first = [e for e in events if isinstance(e, Failure)]
    assert first and first[0].kind == fk.UNKNOWN
    later = scanner.feed(
        "(EngineCore pid=7) ERROR 02-01 09:00:05 [core.py:1600] vllm.v1.errors.PlannerError: "
        "the fused MoE planner needs 3 GiB of scratch space"
    )
    updated = [e for e in later if isinstance(e, Failure)]
    assert updated and "PlannerError: the fused MoE planner needs 3 GiB" in updated[0].message
    assert scanner.failure is updated[0]
    failure = classify_exit(1, scanner, was_ready=False)
    assert failure is not None and "PlannerError" in failure.message
