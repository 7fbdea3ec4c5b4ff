"""A planted Hugging Face token and API key never show up: not in the settings file (they are in
the keyring), argv of the server's processes, the launch log, the log view, Python's logging, the
copied command, the settings dialog's visible text (what a screenshot shows), or the failure
report of a crashed launch."""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path

import keyring
import psutil
import pytest
from fakes.memory_keyring import MemoryKeyring
from ports import free_port
from PySide6.QtWidgets import QLabel, QLineEdit, QPlainTextEdit, QTextEdit
from testpaths import TESTS as TESTS_DIR

from kvpilot.core.app import settings as st
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.gui.dialogs.settings_dialog import SettingsDialog

TESTS = TESTS_DIR
FAKE_VLLM = TESTS / "fakes" / "fake_vllm.py"
FAIL_LOG = TESTS / "data" / "supervisor" / "fail_b1_kvbytes_tiny.log"
TOKEN = "hf_PLANTEDsecret9f8e7d6c5b4a"
KEY = "sk-PLANTED-api-key-1a2b3c"


@pytest.fixture
def ring(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KVPILOT_SECRETS", raising=False)
    before = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(before)


@pytest.fixture(autouse=True)
def _catalog_models_need_no_download(monkeypatch):
    from kvpilot.core.app import launch

    monkeypatch.setattr(launch, "launchable_spec", lambda spec, **_: spec)


def _visible_texts(widget) -> list[str]:
    out = []
    for child in widget.findChildren(QLabel):
        out.append(child.text())
    for child in widget.findChildren(QPlainTextEdit):
        out.append(child.toPlainText())
    for child in widget.findChildren(QTextEdit):
        out.append(child.toPlainText())
    for child in widget.findChildren(QLineEdit):
        if child.echoMode() == QLineEdit.EchoMode.Normal:
            out.append(child.text())
    return out


def _window_with_secrets(make_window, qtbot):
    w = make_window(supervisor_options={"check_flags": False, "settle_s": 0.1,
                                        "health_interval_s": 0.1})
    port = free_port(19600)
    w.settings = st.update_profile(
        w.settings, replace(w.profile, api_key=KEY, hf_token=TOKEN, port=port)
    )
    w.profile_control.save()
    w.profile_control.apply_profile()
    w.runtime_control.set_runtime(
        VllmRuntime((sys.executable, str(FAKE_VLLM)), "0.32.0", "env", str(FAKE_VLLM))
    )
    qtbot.waitUntil(lambda: w.planner.selected() is not None, timeout=15_000)
    return w


def test_a_crashed_launch_reports_no_secret(
    make_window, qtbot, ring, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("FAKE_VLLM_ECHO_ENV", "VLLM_API_KEY")
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(FAIL_LOG))
    w = _window_with_secrets(make_window, qtbot)
    w.server_control.launch_selected()
    qtbot.waitUntil(lambda: w.server_panel.state == "failed", timeout=30_000)
    qtbot.waitUntil(lambda: bool(w.banner.option_buttons), timeout=15_000)
    failure = w.fallback_control.last_failure
    assert failure is not None
    log_file = Path(w.services.supervisor.log_path).read_text()
    assert "VLLM_API_KEY=" in log_file
    for where, text in {
        "failure report": repr(failure) + str(failure),
        "banner": "\n".join(_visible_texts(w.banner)),
        "launch log": log_file,
        "python logging": caplog.text,
        "main window text": "\n".join(_visible_texts(w)),
    }.items():
        assert KEY not in text and TOKEN not in text, f"a secret leaked into the {where}"


def test_planted_secrets_appear_nowhere(
    make_window, store, qtbot, ring, monkeypatch, caplog, tmp_path
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("FAKE_VLLM_CHILD", "1")
    monkeypatch.setenv("FAKE_VLLM_ECHO_ENV", "HF_TOKEN")  # a program that prints its token
    w = _window_with_secrets(make_window, qtbot)
    assert store.secrets.kind == "keyring"
    # the file has neither; the keyring has both
    assert TOKEN not in store.path.read_text() and KEY not in store.path.read_text()
    assert set(ring.passwords.values()) == {KEY, TOKEN}

    copied = w.plan_control.copy_command()
    assert copied is not None and "vllm serve" in copied

    w.launch_action.trigger()
    qtbot.waitUntil(lambda: w.server_panel.state == "ready", timeout=30_000)
    sup = w.services.supervisor
    cmdlines = []
    for pid in sup.tree_pids():
        try:
            cmdlines.append(" ".join(psutil.Process(pid).cmdline()))
        except psutil.NoSuchProcess:
            continue
    assert cmdlines and any("serve" in c for c in cmdlines)
    # the secrets reached the child through its environment only
    assert sup.command.env.get("HF_TOKEN") == TOKEN
    assert sup.command.env.get("VLLM_API_KEY") == KEY
    qtbot.waitUntil(lambda: "HF_TOKEN=" in w.log_view.visible_text(), timeout=10_000)
    log_file = Path(sup.log_path).read_text()
    assert "HF_TOKEN=" in log_file  # the leaky line arrived, redacted
    view = w.log_view.visible_text()
    assert w.server_control.stop_server()
    qtbot.waitUntil(lambda: w.server_panel.state == "stopped", timeout=30_000)

    dialog = SettingsDialog(w.settings, secrets_note=store.secrets.describe())
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.api_key.echoMode() == QLineEdit.EchoMode.Password
    assert dialog.hf_token.echoMode() == QLineEdit.EchoMode.Password
    assert "system keyring (MemoryKeyring)" in dialog.storage.text()
    dialog.grab().save(str(tmp_path / "settings.png"))
    w.grab().save(str(tmp_path / "window.png"))

    places = {
        "settings file": store.path.read_text(),
        "argv of the server tree": "\n".join(cmdlines),
        "launch log": log_file,
        "log view": view,
        "python logging": caplog.text,
        "copied command": copied,
        "settings dialog text": "\n".join(_visible_texts(dialog)),
        "main window text": "\n".join(_visible_texts(w)),
    }
    for where, text in places.items():
        assert TOKEN not in text, f"the token leaked into the {where}"
        assert KEY not in text, f"the API key leaked into the {where}"
    for png in ("settings.png", "window.png"):
        data = (tmp_path / png).read_bytes()
        assert data and TOKEN.encode() not in data and KEY.encode() not in data


@pytest.fixture
def no_system_keyring(monkeypatch: pytest.MonkeyPatch):
    from keyring.backends import fail

    monkeypatch.delenv("KVPILOT_SECRETS", raising=False)
    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(before)


def test_file_fallback_choice_moves_the_secrets_and_says_where(
    make_window, store, qtbot, no_system_keyring
) -> None:
    w = make_window()
    w.settings = st.update_profile(w.settings, replace(w.profile, api_key=KEY, hf_token=TOKEN))
    w.profile_control.save()
    assert store.secrets.kind == "settings-file"
    assert TOKEN in store.path.read_text()

    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.show()
    box = dialog.file_fallback
    assert box.isVisible() and box.isEnabled() and not box.isChecked()
    assert "plain-text file, not encrypted" in box.text()
    assert "stored in the settings file" in dialog.storage.text()

    box.setChecked(True)  # applies at once
    assert store.secrets.kind == "keyring-file"
    assert "keyring's file fallback" in dialog.storage.text()
    assert "stored in the settings file" not in dialog.storage.text()
    ring_file = store.config_dir / "secrets.cfg"
    assert TOKEN not in store.path.read_text() and KEY not in store.path.read_text()
    assert ring_file.stat().st_mode & 0o777 == 0o600
    # keyrings.alt's plain-text file holds them (base64, so not greppable as such)
    again = st.SettingsStore(store.config_dir).load().settings.active
    assert (again.api_key, again.hf_token) == (KEY, TOKEN)
    assert TOKEN not in "\n".join(_visible_texts(dialog))

    box.setChecked(False)  # withdrawn: back into the 0600 settings file, out of secrets.cfg
    assert store.secrets.kind == "settings-file"
    assert "stored in the settings file" in dialog.storage.text()
    assert TOKEN in store.path.read_text()
    from keyrings.alt.file import PlaintextKeyring

    leftover = PlaintextKeyring()
    leftover.file_path = str(ring_file)
    assert leftover.get_password("kvpilot", "Default/hf_token") is None
    assert not (store.config_dir / "secrets-file-fallback-accepted").exists()


def test_file_fallback_is_not_offered_with_a_system_keyring(make_window, qtbot, ring) -> None:
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.file_fallback.isVisible()
    assert "system keyring (MemoryKeyring)" in dialog.storage.text()
