"""GUI "Attach": watch a server kvpilot did not start (Detach, never Stop); gaps keep the app up."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fakes.openai_server import DATA, FakeServer


@pytest.fixture
def server(tmp_path: Path):
    model = tmp_path / "qwen3-8b"
    shutil.copytree(DATA / "models" / "qwen3-8b", model)
    srv = FakeServer(str(model))
    yield srv
    srv.die()


def test_attach_feeds_the_dashboard_and_offers_no_stop(make_window, qtbot, server) -> None:
    w = make_window()
    dialog = w.attach_control.open_attach(modal=False)
    assert dialog.url.text() == "http://127.0.0.1:8000"
    dialog.url.setText(server.url + "/v1")
    dialog.accept()
    qtbot.waitUntil(lambda: w.attach_control.attached is not None, timeout=10_000)
    panel = w.server_panel
    assert panel.state == "attached"
    assert "tiny" in panel.status.text() and "vLLM 0.32.0" in panel.status.text()
    assert "not started by kvpilot" in panel.status.text()
    assert not panel.stop_button.isVisibleTo(w) and panel.detach_button.isVisibleTo(w)
    assert not panel.launch_button.isEnabled()
    assert panel.endpoint.text() == f"{server.url}/v1"
    # the reported capacity (cache_config_info) and the prediction for the local RTX 4090
    text = panel.capacity.text()
    assert "vLLM reported 1,048,576 tok" in text and text.startswith("Predicted KV ")
    qtbot.waitUntil(lambda: server.requests.count("/metrics") >= 3, timeout=10_000)
    assert w.services.telemetry.latest().cache_config["kv_cache_size_tokens"] == "1048576"
    # Stop does nothing to a server kvpilot does not own
    assert w.server_control.stop_server() is False
    # a lost connection is a gap: the window stays attached, telemetry names the error
    server.die()
    qtbot.waitUntil(lambda: w.services.telemetry.latest().last_scrape_error is not None,
                    timeout=10_000)
    assert w.attach_control.attached is not None and panel.state == "attached"
    # the load test targets the attached server
    bench = w.benchmark_control.open(modal=False)
    assert bench is not None and server.url in bench.status.text()
    bench.close()
    w.attach_control.detach()
    assert w.attach_control.attached is None and w.services.metrics_sampler is None
    assert panel.state is None and panel.stop_button.isVisibleTo(w)


def test_attach_with_a_saved_log(make_window, qtbot, server) -> None:
    w = make_window()
    dialog = w.attach_control.open_attach(modal=False)
    dialog.url.setText(server.url)
    dialog.log_path.setText(str(DATA / "vllm_logs" / "cpu_0.32" / "startup.log"))
    assert dialog.values()[2].endswith("startup.log")
    dialog.accept()
    qtbot.waitUntil(lambda: w.attach_control.attached is not None, timeout=10_000)
    assert "vLLM reported 1,048,576 tok" in w.server_panel.capacity.text()
    w.attach_control.detach()
    bad = w.attach_control.attach(server.url, None, "/no/such.log")
    assert bad
    qtbot.waitUntil(lambda: "cannot read the log" in w.statusBar().currentMessage(),
                    timeout=10_000)
    assert w.attach_control.attached is None


def test_attach_to_nothing_is_one_message(make_window, qtbot) -> None:
    w = make_window()
    assert w.attach_control.attach("http://127.0.0.1:9")
    qtbot.waitUntil(lambda: "cannot reach" in w.statusBar().currentMessage(), timeout=10_000)
    assert w.attach_control.attached is None and w.server_panel.state is None
