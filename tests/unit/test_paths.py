"""Where kvpilot keeps its files, and the one sentence a failed write turns into."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from platformdirs import user_cache_dir, user_data_dir

from kvpilot.core import paths


def test_the_environment_moves_data_and_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "c"))
    assert paths.data_dir() == tmp_path / "d"
    assert paths.cache_dir() == tmp_path / "c"
    assert paths.measurements_path() == tmp_path / "d" / "measurements.json"
    assert not (tmp_path / "d").exists()  # named, not created


def test_without_overrides_the_platform_folders_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVPILOT_DATA_DIR", raising=False)
    monkeypatch.delenv("KVPILOT_CACHE_DIR", raising=False)
    assert paths.data_dir() == Path(user_data_dir("kvpilot"))
    assert paths.cache_dir() == Path(user_cache_dir("kvpilot"))


def test_a_full_disk_names_the_mount_the_bytes_and_the_fix(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "measurements.json"
    full = OSError(errno.ENOSPC, "No space left on device")
    text = paths.write_failure(target, full, 12_345, env_var="KVPILOT_DATA_DIR")
    assert f"the disk holding {target.parent}" in text
    assert "needs 12,345 bytes" in text and "bytes are free" in text
    assert "set KVPILOT_DATA_DIR" in text and "previous file is kept" in text


def test_another_write_error_gives_the_os_reason(tmp_path: Path) -> None:
    denied = OSError(errno.EACCES, "Permission denied")
    text = paths.write_failure(tmp_path / "x.json", denied, 10, env_var="KVPILOT_DATA_DIR")
    assert text == (
        f"cannot write {tmp_path / 'x.json'}: Permission denied (the previous file is kept)"
    )
