"""A full disk while writing settings, measurements or a launch log, or while downloading a
model from the Hub: the previous file survives (atomic writes), the user is told which disk is
full and how much is needed, a launch log that cannot be written is reported once while
supervision goes on, and a download keeps its partial file and resumes from it.

The disk is a real 256 KiB tmpfs where the tests may mount one (root); elsewhere the write's
``fsync`` is made to fail with ENOSPC, which exercises the same paths.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import SettingsError
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.fit.measurements import Measured, MeasurementStore, measurement_key

TESTS = Path(__file__).resolve().parents[1]


class Disk:
    """A small disk at ``root``; :meth:`fill` leaves no byte free."""

    def __init__(self, root: Path, real: bool, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.real = real
        self._mp = monkeypatch

    def fill(self) -> None:
        if not self.real:
            def no_space(_fd: int) -> None:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            self._mp.setattr(os, "fsync", no_space)
            return
        with (self.root / "filler").open("wb", buffering=0) as fh, contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 4096)


@contextlib.contextmanager
def _small_disk(
    root: Path, size: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Disk]:
    root.mkdir()
    real = False
    if os.geteuid() == 0:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)],
            capture_output=True,
            check=False,
        )
        real = proc.returncode == 0
    try:
        yield Disk(root, real, monkeypatch)
    finally:
        if real:
            subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    with _small_disk(tmp_path / "disk", "256k", monkeypatch) as d:
        yield d


@pytest.fixture
def download_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    """An 8 MiB disk: room for the 6 MiB download below, until something else fills it."""
    with _small_disk(tmp_path / "disk", "8m", monkeypatch) as d:
        yield d


def test_settings_on_a_full_disk_keep_the_old_file_and_name_the_disk(disk: Disk) -> None:
    store = st.SettingsStore(disk.root / "config")
    old = st.Settings()
    store.save(old)
    before = store.path.read_text(encoding="utf-8")
    disk.fill()
    bigger = st.update_profile(old, replace(old.active, extra_args="--seed 1 " * 4000))
    with pytest.raises(SettingsError) as err:
        store.save(bigger)
    message = err.value.message
    print(f"settings on a full disk ({'tmpfs' if disk.real else 'simulated'}): {message}")
    assert "is full" in message and "bytes" in message and st.CONFIG_DIR_ENV in message
    if disk.real:
        assert f"mounted at {disk.root}" in message
    assert store.path.read_text(encoding="utf-8") == before  # the old file survived
    assert sorted(p.name for p in store.config_dir.iterdir()) == ["settings.json"]  # no tmp
    assert store.load().settings == old


def test_measurements_on_a_full_disk_keep_the_old_entries(disk: Disk) -> None:
    store = MeasurementStore(disk.root / "data" / "measurements.json")
    key = measurement_key(
        gpu_name="cpu", gpu_total_bytes=1 << 30, model="m", vllm_version="0.32.0",
        settings=ServingSettings(), weights_bytes=1,
    )
    first = Measured(measured_at="2026-12-01T00:00:00Z", source="launch", kv_cache_tokens=1)
    store.record(key, first)
    disk.fill()
    other = measurement_key(
        gpu_name="cpu", gpu_total_bytes=1 << 30, model="n", vllm_version="0.32.0",
        settings=ServingSettings(), weights_bytes=2,
    )
    with pytest.raises(SettingsError) as err:
        store.record(other, first)
    assert "is full" in err.value.message and "KVPILOT_DATA_DIR" in err.value.message
    assert store.lookup(key) == first
    assert sorted(p.name for p in store.path.parent.iterdir()) == ["measurements.json"]


def test_a_launch_log_on_a_full_disk_is_reported_once_and_serving_goes_on(
    disk: Disk, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if not disk.real:
        pytest.skip("needs a real small disk (tmpfs mount as root)")
    from ports import free_port

    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.supervisor import READY, Supervisor

    fake = TESTS / "fakes" / "fake_vllm.py"
    monkeypatch.setenv("FAKE_VLLM_FLOOD", "20000,100000")
    runtime = VllmRuntime((sys.executable, str(fake)), "0.32.0", "env", str(fake))
    spec = LaunchSpec(model="/models/tiny", port=free_port(19700))
    caplog.set_level(logging.WARNING, logger="kvpilot.core.vllm.supervisor")
    sup = Supervisor(runtime, spec, data_dir=disk.root / "data", check_flags=False)
    sup.start()
    try:
        assert sup.wait_ready(20)
        disk.fill()  # the disk fills up while the server runs and logs
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            "flood line 000019999" in line for line in sup.lines()[-5:]
        ):
            time.sleep(0.1)
        assert sup.state == READY
        assert any("flood line 000019999" in line for line in sup.lines()[-5:])
        failures = [r for r in caplog.records if "cannot be written" in r.getMessage()]
        assert len(failures) == 1
    finally:
        sup.stop(sigint_wait_s=2, sigterm_wait_s=2)


def test_a_download_on_a_disk_that_fills_up_names_it_and_resumes(
    download_disk: Disk, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not download_disk.real:
        pytest.skip("needs a real small disk (tmpfs mount as root); tests/unit/vllm simulates it")
    from fakes.fake_hub import FakeHub, isolate_hf

    from kvpilot.core.hub.download import Downloader, plan_download
    from kvpilot.core.hub.download_errors import DiskFullError

    root = download_disk.root
    weights = hashlib.sha256(b"weights").digest() * (6 * 2**20 // 32)  # 6 MiB
    files = {"config.json": b'{"architectures": ["LlamaForCausalLM"]}',
             "model.safetensors": weights}
    # settings and measurements live on the same disk: the failed download must not touch them
    settings_store = st.SettingsStore(root / "config")
    settings_store.save(st.Settings())
    measurements = MeasurementStore(root / "data" / "measurements.json")
    key = measurement_key(
        gpu_name="cpu", gpu_total_bytes=1 << 30, model="m", vllm_version="0.32.0",
        settings=ServingSettings(), weights_bytes=1,
    )
    measurements.record(key, Measured(measured_at="2026-12-01T00:00:00Z", source="launch",
                                      kv_cache_tokens=1))
    before = {p: p.read_bytes() for p in (settings_store.path, measurements.path)}
    written = [0]

    class FilledMidway:
        """The real partial file; once 2 MiB of it are written another program fills the
        disk, so the following writes meet the real ENOSPC of the tmpfs."""

        def __init__(self, path: Path) -> None:
            self._fh = path.open("ab")

        def write(self, data: bytes) -> int:
            if written[0] <= 2 * 2**20 < written[0] + len(data):
                self._fh.flush()
                download_disk.fill()
            written[0] += len(data)
            return self._fh.write(data)

        def __getattr__(self, name: str) -> object:
            return getattr(self._fh, name)

    with FakeHub() as hub:
        isolate_hf(monkeypatch, root, hub.endpoint)
        hub.add_repo("acme/tiny", files)
        plan = plan_download("acme/tiny")
        with pytest.raises(DiskFullError) as err:
            Downloader(plan, lambda _e: None, open_file=FilledMidway).run()  # type: ignore[arg-type]
        error = err.value
        print(f"download on a full disk: {error.message}")
        partial = error.partial_path
        kept = partial.stat().st_size
        assert partial.name.endswith(".incomplete") and 2**20 < kept < len(weights)
        assert f"(mounted at {root})" in error.message and error.mount == root
        assert error.needed_bytes == len(weights) - kept
        assert error.free_bytes is not None and error.free_bytes < 64 * 1024
        assert f"kept in {partial}" in error.message and "HF_HUB_CACHE" in error.message
        assert {p: p.read_bytes() for p in before} == before  # settings, measurements intact

        (root / "filler").unlink()  # the user frees space and starts again: it resumes
        hub.requests.clear()
        snapshot = Downloader(plan_download("acme/tiny"), lambda _e: None).run()
        assert (snapshot / "model.safetensors").read_bytes() == weights
        ranges = [r.range_header for r in hub.settled() if r.method == "GET" and r.range_header]
        assert ranges == [f"bytes={kept}-"], ranges
        assert not partial.exists()
    assert {p: p.read_bytes() for p in before} == before
