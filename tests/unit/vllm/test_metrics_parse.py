"""parse_metrics on the real 0.32.0 payloads, on hand-built older payloads and on bad input."""

from __future__ import annotations

import math

import pytest
from metricskit import PARSERS, parse_with_prometheus_client

from kvpilot.core.vllm.metrics import (
    DISABLED_STATS_MESSAGE,
    ScrapeError,
    ScrapeErrorKind,
    parse_metrics,
)

#: kvpilot's line parser and prometheus_client's (the oracle) on the same tests
BOTH = pytest.mark.parametrize("parse", list(PARSERS.values()), ids=list(PARSERS))


@BOTH
def test_real_after_payload_values(payload, parse):
    s = parse(payload("after"), 12.5)
    assert s.t_monotonic_s == 12.5
    assert s.has_vllm_metrics and s.message is None
    assert not s.legacy_names
    assert s.model_name == "/data/tinymodel"
    assert (s.running, s.waiting, s.kv_usage_frac) == (0.0, 0.0, 0.0)
    assert s.prompt_tokens_total == 657.0
    assert s.generation_tokens_total == 32961.0
    assert s.preemptions_total == 0.0
    assert (s.prefix_queries_total, s.prefix_hits_total) == (657.0, 0.0)
    assert s.request_success_by_reason == {
        "stop": 0.0,
        "length": 51.0,
        "abort": 0.0,
        "error": 0.0,
        "repetition": 0.0,
    }
    assert s.ttft is not None and s.itl is not None and s.e2e is not None and s.tpot is not None
    assert s.ttft.upper_bounds[:3] == (0.001, 0.005, 0.01)
    assert math.isinf(s.ttft.upper_bounds[-1])
    assert s.ttft.cumulative_counts[2] == 15.0 and s.ttft.count == 51.0
    assert s.ttft.sum == pytest.approx(36.594486474990845)
    assert s.itl.count == 32910.0
    assert s.e2e.sum == pytest.approx(155.1392788887024)
    assert s.tpot.cumulative_counts[0] == 51.0
    assert s.cache_config["kv_cache_size_tokens"] == "1048576"
    assert s.cache_config_number("num_gpu_blocks") == 8192
    assert s.cache_config_number("block_size") == 128
    assert s.cache_config_number("kv_cache_max_concurrency") == 1024.0
    assert s.cache_config_number("sliding_window") is None  # "None"
    assert s.cache_config_number("no_such_label") is None
    assert s.cache_config_capacity() == {
        "kv_cache_tokens": 1_048_576, "max_concurrency": 1024.0, "num_blocks": 8192,
        "block_size": 128, "kv_cache_memory_bytes": 1 << 30,
    }
    assert isinstance(s.cache_config_capacity()["num_blocks"], int)


def test_fast_and_full_paths_agree(real_payload):
    fast = parse_metrics(real_payload, 1.0)
    assert fast == parse_with_prometheus_client(real_payload, 1.0)


@BOTH
def test_counters_grow_between_real_payloads(payload, parse):
    before, during, after = (
        parse(payload(n), 0.0) for n in ("before", "during", "after")
    )
    assert before.generation_tokens_total == 0.0
    gen = [s.generation_tokens_total for s in (before, during, after)]
    assert gen == sorted(gen) and len(set(gen)) == 3
    assert during.request_success_by_reason["length"] == 20.0
    # every bucket is cumulative: non-decreasing in le and ending at the count
    for h in (after.ttft, after.itl, after.e2e, after.tpot):
        assert h is not None
        assert list(h.cumulative_counts) == sorted(h.cumulative_counts)
        assert h.cumulative_counts[-1] == h.count


OLD_PAYLOAD = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 2.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.93
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="m"} 1000.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="m"} 5000.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 4.0
# TYPE vllm:gpu_prefix_cache_queries_total counter
vllm:gpu_prefix_cache_queries_total{model_name="m"} 800.0
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{model_name="m"} 200.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{finished_reason="length",model_name="m"} 3.0
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="m"} 10.0
vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="m"} 40.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 50.0
vllm:time_per_output_token_seconds_count{model_name="m"} 50.0
vllm:time_per_output_token_seconds_sum{model_name="m"} 1.5
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="1.0",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",model_name="m"} 1.0
"""


@BOTH
def test_older_names(parse):
    s = parse(OLD_PAYLOAD, 3.0)
    assert s.has_vllm_metrics and s.legacy_names
    assert (s.running, s.waiting) == (3.0, 2.0)
    assert s.kv_usage_frac == pytest.approx(0.93)
    assert (s.prefix_queries_total, s.prefix_hits_total) == (800.0, 200.0)
    assert s.preemptions_total == 4.0
    assert s.request_success_by_reason == {"stop": 7.0, "length": 3.0}
    assert s.itl is not None and s.itl.cumulative_counts == (10.0, 40.0, 50.0)
    assert s.ttft is not None and s.ttft.count == 10.0
    assert s.e2e is None and s.tpot is None  # absent families stay None, not zero
    assert s.cache_config_number("num_gpu_blocks") == 2048
    assert s.cache_config.get("kv_cache_size_tokens") is None
    # before 0.25 the labels carry no KV size: only what is there is reported
    assert s.cache_config_capacity() == {"num_blocks": 2048, "block_size": 16}


@BOTH
def test_new_kv_name_wins_over_old(parse):
    text = OLD_PAYLOAD + 'vllm:kv_cache_usage_perc{model_name="m"} 0.5\n'
    assert parse(text, 0.0).kv_usage_frac == 0.5


@BOTH
def test_two_engines_are_combined(parse):
    text = "".join(
        f'vllm:num_requests_running{{engine="{e}",model_name="m"}} {e + 1}.0\n'
        f'vllm:num_requests_waiting{{engine="{e}",model_name="m"}} 1.0\n'
        f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="m"}} 0.{e + 2}\n'
        f'vllm:generation_tokens_total{{engine="{e}",model_name="m"}} 100.0\n'
        f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="1.0",model_name="m"}} 2.0\n'
        f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="+Inf",model_name="m"}} 3.0\n'
        for e in (0, 1)
    )
    s = parse(text, 0.0)
    assert s.running == 3.0 and s.waiting == 2.0
    assert s.kv_usage_frac == pytest.approx(0.3)  # the fullest engine
    assert s.generation_tokens_total == 200.0
    assert s.ttft is not None and s.ttft.cumulative_counts == (4.0, 6.0)
    assert s.ttft.count == 6.0  # no _count line: taken from +Inf


@BOTH
def test_disable_log_stats_has_no_vllm_metrics(payload, parse):
    text = "".join(line + "\n" for line in payload("after").splitlines() if "vllm:" not in line)
    s = parse(text, 4.0)
    assert s.has_vllm_metrics is False
    assert s.message == DISABLED_STATS_MESSAGE and "--disable-log-stats" in s.message
    assert s.running is None and s.kv_usage_frac is None and s.generation_tokens_total is None
    assert s.ttft is None and dict(s.cache_config) == {}


BAD = {
    "empty": ("", ScrapeErrorKind.EMPTY),
    "blank": ("\n\n  \n", ScrapeErrorKind.EMPTY),
    "html": ("<html><body>Bad gateway</body></html>\n", ScrapeErrorKind.MALFORMED),
    "garbage": ("\x00\x01 ~~~ not { prometheus\n", ScrapeErrorKind.MALFORMED),
    "json": ('{"error": "not found"}\n', ScrapeErrorKind.MALFORMED),
    "bad value": (
        'vllm:num_requests_running{engine="0",model_name="m"} lots\n',
        ScrapeErrorKind.MALFORMED,
    ),
    "unclosed labels": (
        'vllm:num_requests_running{engine="0",model_name="m 1.0\n',
        ScrapeErrorKind.MALFORMED,
    ),
    "bucket without le": (
        OLD_PAYLOAD + 'vllm:e2e_request_latency_seconds_bucket{model_name="m"} 1.0\n',
        ScrapeErrorKind.MALFORMED,
    ),
    "histogram without +Inf": (
        OLD_PAYLOAD.replace(
            'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0\n', ""
        ),
        ScrapeErrorKind.TRUNCATED,
    ),
}


@BOTH
@pytest.mark.parametrize("case", list(BAD))
def test_bad_payloads_raise_typed_error(case, parse):
    text, kind = BAD[case]
    with pytest.raises(ScrapeError) as info:
        parse(text, 0.0)
    assert info.value.kind is kind
    assert "/metrics" in str(info.value)


@BOTH
@pytest.mark.parametrize("fraction", [0.05, 0.33, 0.5, 0.77, 0.999])
def test_truncated_real_payload_mid_line(payload, parse, fraction):
    text = payload("after")
    cut = int(len(text) * fraction)
    if text[cut - 1] == "\n":
        cut -= 1
    with pytest.raises(ScrapeError) as info:
        parse(text[:cut], 0.0)
    assert info.value.kind is ScrapeErrorKind.TRUNCATED


@BOTH
def test_truncated_real_payload_at_line_boundary_inside_vllm_section(payload, parse):
    text = payload("after")
    cut = text.index("vllm:kv_cache_usage_perc{")  # the gauges after it are missing
    with pytest.raises(ScrapeError) as info:
        parse(text[:cut], 0.0)
    assert info.value.kind is ScrapeErrorKind.TRUNCATED
    assert "kv_usage_frac" in str(info.value)


TRICKY = (
    # escapes, a comma and a brace inside a label value, a trailing comma, a timestamp,
    # tabs, exponent and NaN values
    'vllm:num_requests_running{engine="0",model_name="org/m \\"x\\", {y} \\\\ z\\n",} 2\n'
    'vllm:num_requests_waiting{engine="0",model_name="org/m \\"x\\", {y} \\\\ z\\n"}\t1.5e0\n'
    'vllm:kv_cache_usage_perc{engine="0"} 0.25 1700000000000\n'
    "vllm:generation_tokens_total 1e+03\n"
    "vllm:prompt_tokens_total NaN\n"
    "vllm:cache_config_info{block_size=\"16\",kv_cache_dtype_skip_layers=\"['a', 'b']\"} 1.0\n"
)


def test_fast_line_parser_matches_prometheus_client_on_tricky_lines():
    fast = parse_metrics(TRICKY, 0.0)
    full = parse_with_prometheus_client(TRICKY, 0.0)
    assert fast.model_name == 'org/m "x", {y} \\ z\n'
    assert fast.running == 2.0 and fast.waiting == 1.5 and fast.kv_usage_frac == 0.25
    assert fast.generation_tokens_total == 1000.0
    assert fast.cache_config["kv_cache_dtype_skip_layers"] == "['a', 'b']"
    assert math.isnan(fast.prompt_tokens_total) and math.isnan(full.prompt_tokens_total)
    assert replace_nan(fast) == replace_nan(full)


def replace_nan(sample):
    from dataclasses import replace

    return replace(sample, prompt_tokens_total=None)


@BOTH
def test_only_unknown_vllm_families_is_not_mistaken_for_disabled_stats(parse):
    text = 'python_info{version="3.12"} 1.0\nvllm:some_future_gauge{engine="0"} 3.0\n'
    with pytest.raises(ScrapeError) as info:
        parse(text, 0.0)
    assert info.value.kind is ScrapeErrorKind.TRUNCATED
    assert "version this app does not know" in str(info.value)


@BOTH
def test_comments_only_is_malformed(parse):
    with pytest.raises(ScrapeError) as info:
        parse("# HELP x y\n# TYPE x gauge\n", 0.0)
    assert info.value.kind is ScrapeErrorKind.MALFORMED
