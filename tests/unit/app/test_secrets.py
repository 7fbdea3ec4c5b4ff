"""API key and HF token in the system keyring; the settings file only as the last resort;
secrets in an older file migrate on the first load."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import keyring
import pytest
from fakes.memory_keyring import MemoryKeyring

from kvpilot.core.app import secrets as sec
from kvpilot.core.app import settings as st

TOKEN = "hf_PLANTEDtoken0123456789abcdef"
KEY = "sk-planted-api-key-42"


@pytest.fixture
def ring(monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryKeyring]:
    monkeypatch.delenv(sec.BACKEND_ENV, raising=False)
    before = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(before)


def _with_secrets(settings: st.Settings, name: str = "Default") -> st.Settings:
    return st.update_profile(
        settings, replace(settings.profile(name), api_key=KEY, hf_token=TOKEN)
    )


def test_secrets_go_to_the_keyring_not_the_file(tmp_path: Path, ring: MemoryKeyring) -> None:
    store = st.SettingsStore(tmp_path)
    assert store.secrets.kind == "keyring"
    assert "system keyring (MemoryKeyring)" in store.secrets.describe()
    store.save(_with_secrets(st.Settings()))
    raw = store.path.read_text()
    assert TOKEN not in raw and KEY not in raw
    assert ring.passwords == {("kvpilot", "Default/api_key"): KEY,
                              ("kvpilot", "Default/hf_token"): TOKEN}
    loaded = st.SettingsStore(tmp_path).load().settings.active
    assert (loaded.api_key, loaded.hf_token) == (KEY, TOKEN)


def test_secrets_in_an_older_file_migrate_on_first_load(
    tmp_path: Path, ring: MemoryKeyring, caplog: pytest.LogCaptureFixture
) -> None:
    old = st.SettingsStore(tmp_path, secrets=sec.SecretStore(sec.KIND_SETTINGS_FILE))
    old.save(_with_secrets(st.Settings()))
    assert TOKEN in old.path.read_text()  # what an earlier kvpilot wrote
    caplog.set_level("DEBUG")
    result = st.SettingsStore(tmp_path).load()
    assert (result.settings.active.api_key, result.settings.active.hf_token) == (KEY, TOKEN)
    raw = json.loads(old.path.read_text())
    assert raw["profiles"][0]["api_key"] == "" and raw["profiles"][0]["hf_token"] == ""
    assert ring.passwords[("kvpilot", "Default/hf_token")] == TOKEN
    assert "moved the secrets of 1 profile(s) to the keyring" in caplog.text
    assert TOKEN not in caplog.text and KEY not in caplog.text


def test_a_chain_is_taken_apart_so_that_no_unaccepted_file_is_read(tmp_path: Path) -> None:
    """A desktop with keyrings.alt installed: keyring chains the system keyring with a
    plain-text file. kvpilot talks to the system keyring alone."""
    from keyring.backends import chainer
    from keyrings.alt.file import PlaintextKeyring

    system = MemoryKeyring()
    plain = PlaintextKeyring()
    plain.file_path = str(tmp_path / "plain.cfg")
    plain.set_password("kvpilot", "Default/hf_token", "hf_stale_in_a_plain_file")

    class Chain(chainer.ChainerBackend):
        backends: ClassVar[list[object]] = [plain, system]  # the file first, even

    before = keyring.get_keyring()
    keyring.set_keyring(Chain())
    try:
        store = sec.default_store(tmp_path / "config")
        assert store.kind == "keyring" and store.backend is system
        assert store.get("Default", "hf_token") == ""  # the file is not read
        assert store.set("Default", "hf_token", TOKEN)
        assert system.passwords == {("kvpilot", "Default/hf_token"): TOKEN}
        assert plain.get_password("kvpilot", "Default/hf_token") == "hf_stale_in_a_plain_file"
        # a chain of files only is no system keyring
        Chain.backends = [plain]
        assert sec.default_store(tmp_path / "config").kind == "settings-file"
    finally:
        keyring.set_keyring(before)


def test_deleted_profile_takes_its_secrets_along(tmp_path: Path, ring: MemoryKeyring) -> None:
    store = st.SettingsStore(tmp_path)
    settings = _with_secrets(st.create_profile(st.Settings(), "gated"), "gated")
    store.save(settings)
    assert ("kvpilot", "gated/hf_token") in ring.passwords
    store.save(st.delete_profile(settings, "gated"))
    assert not any(user.startswith("gated/") for _, user in ring.passwords)


def test_a_locked_keyring_keeps_the_secret_in_the_file(tmp_path: Path) -> None:
    before = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring(refuse=True))
    try:
        store = st.SettingsStore(tmp_path)
        store.save(_with_secrets(st.Settings()))
        assert TOKEN in store.path.read_text()  # not lost
        assert store.path.stat().st_mode & 0o777 == 0o600
    finally:
        keyring.set_keyring(before)


def test_no_keyring_means_the_0600_file_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keyring.backends import fail

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        store = st.SettingsStore(tmp_path)
        assert store.secrets.kind == "settings-file"
        assert "settings file, readable only by you (permissions 0600)" in (
            store.secrets.describe()
        )
        store.save(_with_secrets(st.Settings()))
        assert TOKEN in store.path.read_text()
        assert store.path.stat().st_mode & 0o777 == 0o600
        # the file fallback is used only when accepted (and installed)
        assert not sec.fallback_accepted(tmp_path)
        sec.accept_file_fallback(tmp_path)
        assert sec.fallback_accepted(tmp_path)
        expected = "keyring-file" if sec.file_fallback_available() else "settings-file"
        assert sec.default_store(tmp_path).kind == expected
    finally:
        keyring.set_keyring(before)


def test_env_forces_the_settings_file(
    tmp_path: Path, ring: MemoryKeyring, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sec.BACKEND_ENV, "settings-file")
    assert st.SettingsStore(tmp_path).secrets.kind == "settings-file"


@pytest.mark.parametrize("fmt", ["command", "docker", "compose", "helm"])
def test_exported_commands_carry_no_secret(
    fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvpilot.core.cli import main

    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    code = main(["export", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090",
                 "--format", fmt])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Qwen2.5-7B-Instruct-AWQ" in out.out
    assert KEY not in out.out + out.err and TOKEN not in out.out + out.err
    if fmt != "helm":
        assert "VLLM_API_KEY" in out.out  # a reference to the secret, never its value


def test_no_session_bus_means_no_keyring_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    for name in ("DBUS_SESSION_BUS_ADDRESS", "PYTHON_KEYRING_BACKEND", sec.BACKEND_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config-home"))
    (tmp_path / "run").mkdir()
    # a keyring already imported (and maybe set up) in this process is always asked
    assert not sec.no_session_bus()
    monkeypatch.delitem(sys.modules, "keyring")
    assert sec.no_session_bus()
    store = sec.default_store(tmp_path / "config")
    assert store.kind == "settings-file"
    assert "keyring" not in sys.modules  # the search was not even imported
    (tmp_path / "run" / "bus").touch()  # a session bus: Secret Service may answer on it
    assert not sec.no_session_bus()
    (tmp_path / "run" / "bus").unlink()
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent")
    assert not sec.no_session_bus()
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
    rc = tmp_path / "config-home" / "python_keyring" / "keyringrc.cfg"
    rc.parent.mkdir(parents=True)
    rc.write_text("[backend]\ndefault-keyring=keyrings.alt.file.PlaintextKeyring\n")
    assert not sec.no_session_bus()  # the user configured keyring: keyring decides


def test_file_fallback_choice_that_cannot_be_recorded_changes_nothing(tmp_path: Path) -> None:
    from keyring.backends import fail

    from kvpilot.core.base.errors import SettingsError

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        blocked = tmp_path / "not-a-dir"
        blocked.write_text("a file where the config directory should be\n")
        store = st.SettingsStore(blocked)
        choice = store.file_fallback_choice()
        assert choice.offered and choice.kind == "settings-file" and not choice.accepted
        with pytest.raises(SettingsError, match="cannot record the choice in"):
            store.set_file_fallback(True, _with_secrets(st.Settings()))
        assert store.secrets.kind == "settings-file"
        assert not sec.fallback_accepted(blocked)
    finally:
        keyring.set_keyring(before)
