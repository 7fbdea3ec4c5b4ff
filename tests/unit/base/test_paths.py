"""Where kvpilot keeps its files, and the one sentence a failed write turns into."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from platformdirs import user_cache_dir, user_data_dir

from kvpilot.core.base import paths


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


def test_a_folder_that_cannot_be_written_is_named_with_its_variable(tmp_path: Path) -> None:
    denied = OSError(errno.EACCES, "Permission denied")
    text = paths.write_failure(tmp_path / "x.json", denied, 10, env_var="KVPILOT_DATA_DIR")
    assert text == (
        f"kvpilot's data folder {tmp_path} cannot be written (Permission denied); set "
        "KVPILOT_DATA_DIR to a folder you can write, or make this one writable (the previous "
        "file is kept)"
    )


def test_another_write_error_gives_the_os_reason(tmp_path: Path) -> None:
    failed = OSError(errno.EIO, "Input/output error")
    text = paths.write_failure(tmp_path / "x.json", failed, 10, env_var="KVPILOT_DATA_DIR")
    assert text == (
        f"cannot write {tmp_path / 'x.json'}: Input/output error (the previous file is kept)"
    )


def test_the_log_and_config_folders_have_their_own_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "d"))
    monkeypatch.delenv("KVPILOT_LOG_DIR", raising=False)
    assert paths.log_dir() == tmp_path / "d" / "logs"
    monkeypatch.setenv("KVPILOT_LOG_DIR", str(tmp_path / "l"))
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "c"))
    assert paths.log_dir() == tmp_path / "l"
    assert paths.config_dir() == tmp_path / "c"


def test_atomic_write_creates_the_folder_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "state.json"
    paths.atomic_write_text(target, '{"x": 1}\n')
    assert target.read_text(encoding="utf-8") == '{"x": 1}\n'
    assert target.stat().st_mode & 0o777 == 0o600
    paths.atomic_write_text(target, "ünïcode\n", mode=0o755)
    assert target.read_bytes() == "ünïcode\n".encode()
    assert target.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.json"]  # no temp file


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    target = tmp_path / "state.json"
    paths.atomic_write_text(target, "old\n")

    def full(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as err:
        paths.atomic_write_text(target, "new\n" * 1000)
    assert err.value.errno == errno.ENOSPC
    assert target.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
