"""A Hub checkpoint is downloaded by kvpilot before vLLM starts: progress reaches the server
panel on the GUI thread, and Stop cancels the download."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from ports import free_port

from kvpilot.core.hub.download_errors import DownloadCancelled
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.gui.bridge import CoreBridge as Bridge
from kvpilot.gui.services import AppServices

REPO = "acme/tiny-gui"
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(4 << 20),
}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with FakeHub() as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        fake.add_repo(REPO, FILES)
        yield fake


class _NoRuntime:
    """Stands where the vLLM runtime goes: the test stops right after the download."""


def test_download_progress_reaches_the_gui_thread(qtbot, hub, tmp_path):
    bridge = Bridge()
    services = AppServices(bridge, fake_gpu="rtx4090-desktop", data_dir=tmp_path / "data")
    seen: list[tuple[int, int, bool]] = []
    main = threading.current_thread()
    bridge.download_progress.connect(
        lambda p: seen.append((p.bytes_done, p.bytes_total, threading.current_thread() is main))
    )
    done = qtbot.waitSignal(
        bridge.download_progress, timeout=10_000,
        check_params_cb=lambda p: p.bytes_done == p.bytes_total,
    )
    with done, pytest.raises(Exception):  # noqa: B017 - no runtime: the launch cannot proceed
        # a port of its own: the default 8000 may be held by another test's server, which the
        # orphan policy refuses before any download
        services.start_server(_NoRuntime(),
                              LaunchSpec(model=REPO, port=free_port(20500)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert all(on_gui for *_, on_gui in seen)
    assert seen[-1][1] == sum(len(b) for b in FILES.values())
    assert not services.server_running()


def test_stop_cancels_a_running_download(qtbot, tmp_path, monkeypatch):
    from kvpilot.core.app import launch as launch_session

    def slow_download(spec, *, on_progress=None, cancel_event=None):
        assert cancel_event is not None
        if not cancel_event.wait(20):
            raise AssertionError("the download was never cancelled")
        raise DownloadCancelled(f"download of {spec.model} cancelled")

    monkeypatch.setattr(launch_session, "launchable_spec", slow_download)
    services = AppServices(Bridge(), fake_gpu="rtx4090-desktop", data_dir=tmp_path / "data")
    errors: list[BaseException] = []

    def launch() -> None:
        try:
            services.start_server(
                _NoRuntime(), LaunchSpec(model=REPO, port=free_port(20500))
            )
        except DownloadCancelled as exc:
            errors.append(exc)

    worker = threading.Thread(target=launch)
    worker.start()
    qtbot.waitUntil(services.server_running, timeout=10_000)  # a download counts as running
    services.stop_server()
    worker.join(20)
    assert not worker.is_alive()
    assert errors and "cancelled" in str(errors[0])
    assert not services.server_running()
