"""A full disk while writing settings, measurements or a launch log: the previous file
survives (atomic writes), the user is told which disk is full and how much is needed, and a
launch log that cannot be written is reported once while supervision goes on.

The disk is a real 256 KiB tmpfs where the tests may mount one (root); elsewhere the write's
``fsync`` is made to fail with ENOSPC, which exercises the same paths.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core import settings as st
from kvpilot.core.errors import SettingsError
from kvpilot.core.fit.plan import ServingSettings
from kvpilot.core.measurements import Measured, MeasurementStore, measurement_key

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


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    root = tmp_path / "disk"
    root.mkdir()
    real = False
    if os.geteuid() == 0:
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(root)],
            capture_output=True,
            check=False,
        )
        real = proc.returncode == 0
    try:
        yield Disk(root, real, monkeypatch)
    finally:
        if real:
            subprocess.run(["umount", "-l", str(root)], check=False)


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
    from kvpilot.core.vllm.command import LaunchSpec, find_free_port
    from kvpilot.core.vllm.runtime import VllmRuntime
    from kvpilot.core.vllm.supervisor import READY, Supervisor

    fake = TESTS / "e2e" / "fake_vllm.py"
    monkeypatch.setenv("FAKE_VLLM_FLOOD", "20000,100000")
    runtime = VllmRuntime((sys.executable, str(fake)), "0.32.0", "env", str(fake))
    spec = LaunchSpec(model="/models/tiny", port=find_free_port("127.0.0.1", 19700))
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
