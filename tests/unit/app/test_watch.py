"""Watching a server kvpilot did not start: identity, samples, capacity, gaps, the CLI."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.openai_server import FakeServer
from testpaths import DATA

from kvpilot.core.app.watch import ServerWatch, WatchError, normalize_url
from kvpilot.core.cli import main

KEY = "sk-watch-me"


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    dest = tmp_path / "qwen3-8b"
    shutil.copytree(DATA / "models" / "qwen3-8b", dest)
    return dest


@pytest.fixture
def server(model_dir: Path) -> Iterator[FakeServer]:
    srv = FakeServer(str(model_dir))
    yield srv
    with contextlib.suppress(OSError):
        srv.die()


def test_normalize_url():
    assert normalize_url("127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert normalize_url("http://box.lan:9000") == "http://box.lan:9000"
    with pytest.raises(WatchError, match="not an http URL"):
        normalize_url("ftp://x")


def test_identity_sample_and_capacity_from_the_layout(server):
    watch = ServerWatch(server.url)
    try:
        ident = watch.start()
        assert (ident.version, ident.model_id, ident.max_model_len) == ("0.32.0", "tiny", 16384)
        assert watch.model is not None and watch.model.num_hidden_layers == 36
        s = watch.poll()
    finally:
        watch.close()
    assert s.connected and s.error is None
    assert (s.values["running"], s.values["waiting"], s.values["kv_usage_frac"]) == (0, 0, 0)
    cap = s.capacity
    assert cap is not None
    assert cap.reported.kv_cache_tokens == 1_048_576 and cap.reported.num_blocks == 8192
    assert cap.reported.kv_bytes == 1 << 30 and cap.reported.max_concurrency == 1024.0
    # Qwen3-8B: 2 x 36 layers x 8 KV heads x 128 x 2 bytes = 147,456 B/token; 128-token blocks
    assert cap.predicted_kv_tokens == ((1 << 30) // (147_456 * 128)) * 128
    assert "KV layout" in cap.basis
    assert cap.token_error_frac == pytest.approx(7168 / 1_048_576 - 1)


def test_full_prediction_when_the_gpu_is_known(server):
    watch = ServerWatch(server.url, gpu_total_bytes=24564 << 20, gpu_name="RTX 4090")
    try:
        watch.start()
        cap = watch.poll().capacity
    finally:
        watch.close()
    assert cap is not None and cap.predicted_kv_bytes is not None
    assert "RTX 4090" in cap.basis
    # the server was given its KV size (cache_config_info's kv_cache_memory_bytes, 1 GiB): the
    # plan keeps it instead of sizing the pool from the utilization, as vLLM does
    assert cap.predicted_kv_bytes == 1 << 30
    assert "the KV size the server was given" in cap.basis and "checkpoint's" in cap.basis
    assert cap.predicted_kv_tokens == ((1 << 30) // (147_456 * 128)) * 128


def test_a_server_that_dies_mid_watch_is_a_gap(server):
    watch = ServerWatch(server.url, timeout_s=1.0)
    try:
        watch.start()
        first = watch.poll()
        server.die()
        gap = watch.poll()
        again = watch.poll()
    finally:
        watch.close()
    assert first.connected
    assert not gap.connected and not again.connected
    assert "is the server running" in (gap.error or "") or "failed" in (gap.error or "")
    assert watch.gaps == 2
    assert gap.identity is not None and gap.identity.model_id == "tiny"
    assert gap.to_json()["connected"] is False
    assert watch.telemetry.latest().last_scrape_error


def test_unreachable_at_the_start_is_one_clear_error():
    watch = ServerWatch("http://127.0.0.1:9", timeout_s=0.5)
    try:
        with pytest.raises(WatchError, match=r"cannot reach http://127\.0\.0\.1:9"):
            watch.start()
    finally:
        watch.close()


def test_api_key_is_sent_and_required(model_dir, monkeypatch, capsys):
    srv = FakeServer(str(model_dir), api_key=KEY)
    try:
        rc = main(["watch", "--url", srv.url, "--json", "--seconds", "0.2"])
        assert rc == 2 and "--api-key-env" in capsys.readouterr().err
        monkeypatch.setenv("WATCH_KEY", KEY)
        rc = main(["watch", "--url", srv.url, "--api-key-env", "WATCH_KEY", "--json",
                   "--seconds", "0.2", "--interval", "0.1"])
        out = capsys.readouterr().out
    finally:
        srv.die()
    assert rc == 0 and KEY not in out
    first = json.loads(out.splitlines()[0])
    assert first["model"] == "tiny" and first["connected"] is True


def test_cli_json_one_object_per_sample_ends_after_seconds(server, capsys, monkeypatch):
    monkeypatch.setattr("kvpilot.core.commands.watch._gpu", lambda *_: (None, ""))
    rc = main(["watch", "--url", server.url, "--json", "--seconds", "1", "--interval", "0.25"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    objs = [json.loads(line) for line in lines]
    # one sample each 0.25 s for one second: at most five; fewer when a busy machine makes each
    # poll slower than the interval, never one begun after the second is up
    assert 2 <= len(objs) <= 5
    assert all(o["version"] == "0.32.0" and o["connected"] for o in objs)
    assert objs[0]["capacity"]["reported_kv_tokens"] == 1_048_576
    assert [o["t_s"] for o in objs] == sorted(o["t_s"] for o in objs)
    assert set(objs[0]["values"]) >= {"running", "waiting", "kv_usage_frac", "ttft_p99_s"}


def test_cli_text_names_the_server_and_keeps_going_through_a_gap(server, capsys, monkeypatch):
    monkeypatch.setattr("kvpilot.core.commands.watch._gpu", lambda *_: (None, ""))
    timer = threading.Timer(0.45, server.die)
    timer.start()
    rc = main(["watch", "--url", server.url, "--seconds", "1.2", "--interval", "0.2"])
    timer.join()
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith(f"watching {server.url}: vLLM 0.32.0, model tiny")
    assert "never stopped" in out
    assert "capacity  reported: 1,048,576 KV tokens, 8,192 blocks" in out
    assert "gap:" in out


def test_capacity_from_a_saved_log_when_metrics_have_none(tmp_path):
    from kvpilot.core.app.watch import capacity_from_log, compare_capacity
    from kvpilot.core.vllm.metrics import MetricsSample

    log = DATA / "vllm_logs" / "cpu_0.32" / "startup.log"
    figures = capacity_from_log(log)
    assert figures["kv_cache_tokens"] == 1_048_576 and figures["available_kv_bytes"] == 1 << 30
    bare = MetricsSample(t_monotonic_s=0.0, has_vllm_metrics=True)
    assert compare_capacity(bare, None, None) is None
    cap = compare_capacity(bare, None, None, log_figures=figures)
    assert cap is not None and cap.reported.kv_cache_tokens == 1_048_576
    assert cap.reported.max_concurrency == 1024.0 and cap.reported.num_blocks is None
    with pytest.raises(WatchError, match="cannot read the log"):
        capacity_from_log(tmp_path / "missing.log")


def test_a_saved_failure_log_is_read_as_a_launch_reads_its_output(tmp_path):
    from kvpilot.core.app.watch import scan_log
    from kvpilot.core.base import failures
    from kvpilot.core.vllm.loglevel import line_level

    log = DATA / "vllm_logs" / "cpu_0.32" / "fail_b1_kvbytes_tiny.log"
    scanned = scan_log(log)
    text = log.read_text(encoding="utf-8").splitlines()
    assert [line for _, line in scanned.lines] == text
    assert [level for level, _ in scanned.lines] == [line_level(line) for line in text]
    assert {level for level, _ in scanned.lines} >= {"INFO", "ERROR"}
    assert scanned.failure is not None and scanned.failure.kind == failures.KV_CACHE_TOO_SMALL
    assert scan_log(DATA / "vllm_logs" / "cpu_0.32" / "startup.log").failure is None
    with pytest.raises(WatchError, match="cannot read the log"):
        scan_log(tmp_path / "missing.log")
