"""The load generator against a local fake OpenAI SSE server, and the bench CLI."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from kvpilot.core.cli import main
from kvpilot.core.vllm.client import (
    LoadTestConfig,
    LoadTestError,
    check_target,
    detect_model,
    format_report,
    run_load_test,
)


def config(fake, **kw):
    base = dict(
        base_url=fake.base_url,
        concurrency_levels=(1, 2, 4),
        prompt_tokens=64,
        output_tokens=8,
        requests_per_level=6,
        duration_s=30.0,
        request_timeout_s=10.0,
    )
    base.update(kw)
    return LoadTestConfig(**base)


def test_levels_latencies_and_tokens(fake_openai):
    # a first token 0.2 s in keeps each request open long enough for the four of the last level
    # to be in the server at once even while other work holds both cores (at 0.02 s a loaded
    # machine started the fourth after the first had ended)
    fake_openai.ttft_s = 0.2
    fake_openai.token_s = 0.005
    report = run_load_test(config(fake_openai))
    assert report.model == "fake-model"  # from /v1/models
    assert [lv.concurrency for lv in report.levels] == [1, 2, 4]
    assert fake_openai.max_inflight == 4
    for lv in report.levels:
        assert lv.requests_sent == lv.requests_ok == 6 and lv.errors == 0
        assert lv.output_tokens_total == 6 * 8
        # at least the server's delays; the upper bounds (100 times them) catch a wrong unit and
        # leave room for a busy machine's scheduling
        assert 0.2 <= lv.ttft_p50_s <= lv.ttft_p90_s <= lv.ttft_p99_s < 2.0
        assert 0.004 <= lv.tpot_p50_s < 0.5
        assert lv.e2e_p50_s >= lv.ttft_p50_s + 7 * 0.005 * 0.9
        assert lv.output_tokens_per_s == pytest.approx(48 / lv.duration_s)
        assert lv.requests_per_s == pytest.approx(6 / lv.duration_s)
        assert lv.goodput_requests == 6 and lv.meets_slo_p99
        assert abs(lv.prompt_tokens_mean - 64) <= 2  # calibrated through /tokenize
    assert report.prompt_calibration == "tokenize"
    assert report.slo_break_concurrency is None
    # server-side count: warm-up plus every level
    assert report.output_tokens_total == fake_openai.generated_tokens == 8 * (1 + 18)
    body = fake_openai.bodies[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 8 and body["ignore_eos"] is True
    # throughput grows with concurrency on a server that is not saturated
    assert report.levels[2].output_tokens_per_s > report.levels[0].output_tokens_per_s


def test_without_tokenize_the_prompt_is_approximated(fake_openai):
    fake_openai.has_tokenize = False
    report = run_load_test(config(fake_openai, concurrency_levels=(1,), requests_per_level=2))
    assert report.prompt_calibration == "approximate"
    words = report.prompt_words
    assert words == round(64 / 1.3)
    # the reported prompt length is the server's own count, not the guess
    assert report.levels[0].prompt_tokens_mean == 2 * words + 1


def test_chat_role_chunk_is_not_the_first_token(fake_openai):
    fake_openai.ttft_s = 0.15
    report = run_load_test(
        config(fake_openai, api="chat", concurrency_levels=(1,), requests_per_level=2)
    )
    lv = report.levels[0]
    assert lv.requests_ok == 2 and lv.ttft_p50_s >= 0.15
    assert fake_openai.bodies[-1]["messages"][0]["role"] == "user"


def test_errors_are_counted_not_raised(fake_openai):
    fake_openai.fail_every = 3
    fake_openai.stream_error_every = 5
    report = run_load_test(
        config(fake_openai, concurrency_levels=(2,), requests_per_level=9, warmup_requests=0)
    )
    lv = report.levels[0]
    # requests 3, 6, 9 answer 500; request 5 breaks mid-stream
    assert lv.errors == 4 and lv.requests_ok == 5
    assert "HTTP 500: boom" in lv.error_examples
    assert any("EngineCore died" in e for e in lv.error_examples)
    assert lv.goodput_requests == 5
    assert lv.output_tokens_total == 5 * 8 + 2  # the broken stream produced 2 tokens


def test_slo_break_concurrency(fake_openai):
    # requests that find two or more others in flight wait 0.6 s for their first token:
    # only concurrency 4 gets there; a first token 0.15 s in keeps the level's four requests
    # open together even while other work holds both cores (at 0.01 s a loaded machine ran
    # them one after another and nothing was busy)
    fake_openai.ttft_s = 0.15
    fake_openai.busy_at = 2
    fake_openai.busy_extra_s = 0.6
    report = run_load_test(config(fake_openai, ttft_slo_s=0.4, requests_per_level=4))
    assert report.levels[0].meets_slo_p99 and report.levels[1].meets_slo_p99
    assert report.slo_break_concurrency == 4
    assert "TTFT P99" in report.slo_break_reason
    lv4 = report.levels[2]
    assert not lv4.meets_slo_p99
    assert lv4.goodput_requests < lv4.requests_ok


def test_tpot_slo(fake_openai):
    fake_openai.token_s = 0.02
    report = run_load_test(
        config(fake_openai, concurrency_levels=(1,), requests_per_level=2, tpot_slo_s=0.01)
    )
    assert report.slo_break_concurrency == 1 and "TPOT P99" in report.slo_break_reason
    assert report.levels[0].goodput_requests == 0


def test_duration_bounds_a_level(fake_openai):
    fake_openai.token_s = 0.01
    t0 = time.monotonic()
    report = run_load_test(
        config(
            fake_openai,
            concurrency_levels=(1,),
            requests_per_level=1000,
            output_tokens=16,
            duration_s=0.4,
            warmup_requests=0,
        )
    )
    assert time.monotonic() - t0 < 5.0
    assert 1 <= report.levels[0].requests_sent <= 5


def test_request_timeout(fake_openai):
    fake_openai.ttft_s = 2.0
    t0 = time.monotonic()
    report = run_load_test(
        config(
            fake_openai,
            concurrency_levels=(2,),
            requests_per_level=2,
            request_timeout_s=0.3,
            warmup_requests=0,
        )
    )
    assert time.monotonic() - t0 < 1.9
    lv = report.levels[0]
    assert lv.errors == 2 and "no answer within 0.3 s" in lv.error_examples[0]
    assert report.slo_break_reason == "no request succeeded"


def test_cancel_and_progress(fake_openai):
    fake_openai.token_s = 0.01
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append(p)
        if p.completed >= 3:
            cancel.set()

    t0 = time.monotonic()
    report = run_load_test(
        config(fake_openai, requests_per_level=50, output_tokens=16),
        on_progress=progress,
        cancel_event=cancel,
    )
    assert time.monotonic() - t0 < 5.0
    assert report.cancelled
    assert len(report.levels) == 1 and report.levels[0].requests_sent < 50
    assert seen[0].completed == 0 and seen[0].planned == 50 and seen[0].levels_total == 3
    assert [p.completed for p in seen] == sorted(p.completed for p in seen)


def test_a_server_that_goes_away_stops_the_run_with_what_finished(fake_openai):
    fake_openai.token_s = 0.005

    def progress(p):
        if p.completed >= 3 and fake_openai.httpd.socket.fileno() != -1:
            fake_openai.close()  # the server goes away mid-level: connections are refused

    t0 = time.monotonic()
    report = run_load_test(
        config(fake_openai, requests_per_level=200, output_tokens=4), on_progress=progress
    )
    assert time.monotonic() - t0 < 5.0
    assert not report.cancelled
    assert report.server_lost is not None and "stopped accepting connections" in (
        report.server_lost
    )
    assert "concurrency 1 level" in report.server_lost
    (level,) = report.levels  # the next levels are not tried
    assert level.requests_ok >= 3 and level.errors >= 1 and level.requests_sent < 200
    assert "stopped: the server at" in format_report(report)


def test_a_refused_connection_alone_does_not_stop_the_run(fake_openai, monkeypatch):
    import httpx

    from kvpilot.core.vllm import client as client_module

    real = client_module._one_request
    calls = [0]

    async def first_refused(client, base_url, cfg, model, prompt):
        calls[0] += 1
        if calls[0] == 2:  # one transient refusal while the server still accepts connections
            error = f"{httpx.ConnectError.__name__}: refused once"
            return client_module.RequestResult(
                False, error, None, None, None, None, 0, connect_failed=True
            )
        return await real(client, base_url, cfg, model, prompt)

    monkeypatch.setattr(client_module, "_one_request", first_refused)
    report = run_load_test(config(fake_openai, concurrency_levels=(1, 2), requests_per_level=4))
    assert report.server_lost is None
    assert [lv.requests_sent for lv in report.levels] == [4, 4]
    assert report.levels[0].errors == 1


def test_api_key_and_unknown_model(fake_openai):
    run_load_test(
        config(fake_openai, concurrency_levels=(1,), requests_per_level=1, api_key="sekret")
    )
    assert fake_openai.headers[-1]["Authorization"] == "Bearer sekret"
    with pytest.raises(LoadTestError, match="does not exist"):
        run_load_test(config(fake_openai, model="nope"))


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:1/", "http://[::1]:8000", "https://127.0.0.2:9"],
)
def test_loopback_targets_accepted(url):
    assert check_target(url) == url.rstrip("/")


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://example.com", "http://0.0.0.0:1"])
def test_remote_targets_need_allow_remote(url):
    with pytest.raises(LoadTestError, match="--allow-remote"):
        check_target(url)
    assert check_target(url, allow_remote=True)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/", "http://", "http://[::1"])
def test_bad_urls(url):
    with pytest.raises(LoadTestError):
        check_target(url)


def test_detect_model_unreachable():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LoadTestError, match="is the server running"):
        detect_model(f"http://127.0.0.1:{port}", timeout_s=1.0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"concurrency_levels": ()}, "concurrency"),
        ({"concurrency_levels": (0,)}, "concurrency"),
        ({"prompt_tokens": 0}, "tokens"),
        ({"requests_per_level": 0}, "requests"),
        ({"duration_s": 0}, "duration"),
        ({"tpot_slo_s": -1}, "goals"),
        ({"api": "responses"}, "api"),
    ],
)
def test_bad_settings(kw, match):
    with pytest.raises(LoadTestError, match=match):
        run_load_test(LoadTestConfig(base_url="http://127.0.0.1:1", **kw))


def test_requests_default():
    cfg = LoadTestConfig(base_url="http://127.0.0.1:1")
    assert cfg.requests_for(1) == 8 and cfg.requests_for(4) == 16


# --- CLI -----------------------------------------------------------------------------------


def test_cli_json(fake_openai, capsys):
    rc = main(
        [
            "bench",
            "--url",
            fake_openai.base_url,
            "--concurrency",
            "1,2",
            "--requests",
            "3",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "4",
            "--json",
        ]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert [lv["concurrency"] for lv in data["levels"]] == [1, 2]
    assert data["levels"][1]["output_tokens_total"] == 12
    assert data["model"] == "fake-model" and data["output_tokens_total"] == 4 * 7


def test_cli_table(fake_openai, capsys):
    rc = main(
        [
            "bench",
            "--url",
            fake_openai.base_url,
            "--concurrency",
            "2",
            "--requests",
            "2",
            "--prompt-tokens",
            "16",
            "--output-tokens",
            "4",
            "--api",
            "chat",
        ]
    )
    out = capsys.readouterr()
    assert rc == 0
    assert "TTFT ms p50/p90/p99" in out.out and "met both goals" in out.out
    assert "concurrency 2 (1/1): 2/2 done" in out.err


def test_cli_all_failed_is_status_1(fake_openai, capsys):
    fake_openai.fail_every = 1
    rc = main(
        [
            "bench",
            "--url",
            fake_openai.base_url,
            "--model",
            "fake-model",
            "--concurrency",
            "1",
            "--requests",
            "2",
            "--output-tokens",
            "2",
            "--json",
        ]
    )
    assert rc == 1


def test_cli_user_errors(capsys, monkeypatch):
    assert main(["bench", "--url", "http://192.168.1.20:8000"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    monkeypatch.delenv("KVPILOT_TEST_KEY", raising=False)
    assert main(["bench", "--url", "http://127.0.0.1:1", "--api-key-env", "KVPILOT_TEST_KEY"]) == 2
    assert "KVPILOT_TEST_KEY is not set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["bench", "--url", "http://127.0.0.1:1", "--concurrency", "a,b"])
    assert info.value.code == 2


def _bench_json(fake_openai, capsys, *extra):
    fake_openai.ttft_s = 0.05
    fake_openai.token_s = 0.02
    args = ["bench", "--url", fake_openai.base_url, "--concurrency", "1,2", "--requests", "3",
            "--prompt-tokens", "16", "--output-tokens", "8", *extra]
    assert main(args) == 0
    return capsys.readouterr().out


def test_cli_reports_gpu_energy_per_token_and_a_throttle(fake_openai, capsys, monkeypatch):
    from fakes import pynvml_stub

    monkeypatch.setenv("KVPILOT_FAKE_NVML", str(pynvml_stub.DATA_DIR / "throttling.json"))
    data = json.loads(_bench_json(fake_openai, capsys, "--json"))
    for lv in data["levels"]:
        gpu = lv["gpu"]
        assert gpu["source"] == "counter" and gpu["samples"] >= 2
        assert 430 < gpu["mean_power_w"] < 455  # the recorded draw, near the 450 W cap
        assert gpu["energy_j"] == pytest.approx(gpu["mean_power_w"] * gpu["duration_s"])
        assert gpu["j_per_token"] == pytest.approx(gpu["energy_j"] / lv["output_tokens_total"])
        assert gpu["throttled"] is True and "power cap" in gpu["throttle_reasons"]
    out = _bench_json(fake_openai, capsys)
    assert "J/token" in out and "(counter); THROTTLED: power cap" in out
    assert "the GPU was throttled at concurrency 1, 2 (power cap" in out


def test_cli_integrates_power_without_a_counter(fake_openai, capsys, monkeypatch):
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx3090-idle")  # no counter, no throttle mask
    data = json.loads(_bench_json(fake_openai, capsys, "--json"))
    gpu = data["levels"][0]["gpu"]
    assert gpu["source"] == "integrated" and gpu["energy_j"] > 0
    assert gpu["throttled"] is None and gpu["throttle_reasons"] == []


def test_cli_without_nvml_has_no_gpu_section(fake_openai, capsys, monkeypatch):
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "no-driver")
    data = json.loads(_bench_json(fake_openai, capsys, "--json"))
    assert all(lv["gpu"] is None for lv in data["levels"])


def test_a_level_shorter_than_the_gpu_sampling_period_still_gets_its_energy(fake_openai):
    """Levels of a fast server end between two GPU samples (here 0.6 s apart, each level a few
    tens of ms, a few hundred on a busy machine): the level's energy waits for the next sample,
    so no level goes without its J/token."""
    import threading
    import time
    from types import SimpleNamespace

    fake_openai.ttft_s = 0.005
    fake_openai.token_s = 0.001
    period_s = 0.6  # the load test waits up to 1 s for the sample after a level
    samples: list[SimpleNamespace] = []
    stop = threading.Event()

    def sampler() -> None:
        energy, last = 0.0, time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            energy += 200.0 * (now - last) * 1000  # 200 W since the last sample, in mJ (the
            last = now  # counter counts the time that passed, however late the sample comes)
            samples.append(SimpleNamespace(t_monotonic_s=now, energy_mj=energy,
                                           power_w=200.0, throttle_reasons_mask=0, ok=True))
            stop.wait(period_s)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    try:
        report = run_load_test(config(fake_openai, requests_per_level=2),
                               gpu_samples=lambda: list(samples))
    finally:
        stop.set()
        thread.join(5)
    assert [lv.concurrency for lv in report.levels] == [1, 2, 4]
    assert all(lv.duration_s < period_s for lv in report.levels)  # shorter than the period
    for lv in report.levels:
        assert lv.gpu is not None, lv.concurrency
        assert lv.gpu.mean_power_w == pytest.approx(200.0, rel=0.05)
        assert lv.gpu.j_per_token is not None and lv.gpu.j_per_token > 0
