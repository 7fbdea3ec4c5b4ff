"""Settings dialog round trip, profile switching, and a corrupted settings file at start."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from kvpilot.core.app import settings as st
from kvpilot.core.base.goal import Goal
from kvpilot.gui.dialogs.settings_dialog import SettingsDialog


def _ok(dialog: SettingsDialog):
    return dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)


def test_settings_dialog_round_trip(make_window, store, qtbot) -> None:
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.host.setText("127.0.0.1")
    dialog.port.setValue(8123)
    dialog.api_key.setText("sk-local")
    dialog.hf_cache.setText("/data/hf")
    dialog.hf_token.setText("hf_abc")
    dialog.sampling.setValue(5.0)
    dialog.theme.setCurrentText("dark")
    # a managed flag in the extra arguments is refused with the setting to change instead
    dialog.extra_args.setText("--max-model-len 4096")
    assert not _ok(dialog).isEnabled()
    assert "context length" in dialog.problems.text()
    dialog.extra_args.setText("--max-cudagraph-capture-size 256")
    assert _ok(dialog).isEnabled() and dialog.problems.text() == ""
    dialog.accept()
    w.profile_control.accept_settings(dialog.result_settings())
    saved = store.load()
    assert saved.warnings == ()
    p = saved.settings.active
    assert (p.port, p.api_key, p.hf_cache_dir, p.hf_token) == (
        8123,
        "sk-local",
        "/data/hf",
        "hf_abc",
    )
    assert (p.sampling_hz, p.theme, p.extra_args) == (
        5.0,
        "dark",
        "--max-cudagraph-capture-size 256",
    )
    # the dialog opened again shows what was saved; secrets are masked
    again = w.profile_control.make_settings_dialog()
    qtbot.addWidget(again)
    assert again.port.value() == 8123 and again.api_key.text() == "sk-local"
    assert again.api_key.echoMode() == again.api_key.EchoMode.Password
    assert "0600" in again.storage.text()


def test_wide_host_needs_an_api_key(make_window, qtbot) -> None:
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.host.setText("0.0.0.0")
    assert not _ok(dialog).isEnabled()
    assert "api_key" in dialog.problems.text()
    dialog.api_key.setText("sk-x")
    assert _ok(dialog).isEnabled()


def test_profiles_create_duplicate_rename_delete_switch(make_window, store, qtbot) -> None:
    w = make_window()
    names = iter(["Long docs", "Long docs fp8", "Docs fp8"])
    dialog = SettingsDialog(w.settings, w, ask_name=lambda *_: next(names))
    qtbot.addWidget(dialog)
    dialog.new_button.click()
    assert dialog.profiles.currentItem().text() == "Long docs"
    dialog.port.setValue(8200)
    dialog.dup_button.click()  # copies the edited port
    assert dialog.profiles.currentItem().text() == "Long docs fp8"
    assert dialog.port.value() == 8200
    dialog.rename_button.click()
    assert [dialog.profiles.item(i).text() for i in range(dialog.profiles.count())] == [
        "Default",
        "Long docs",
        "Docs fp8",
    ]
    dialog.activate_button.click()
    assert "Docs fp8" in dialog.active_label.text()
    # delete the default profile, keep two
    dialog.profiles.setCurrentRow(0)
    dialog.delete_button.click()
    dialog.accept()
    new = w.profile_control.accept_settings(dialog.result_settings())
    assert new.names == ("Long docs", "Docs fp8")
    assert new.active_profile == "Docs fp8"
    assert store.load().settings.active.port == 8200
    assert w.profile_combo.currentText() == "Docs fp8"
    assert [w.profile_combo.itemText(i) for i in range(w.profile_combo.count())] == list(new.names)


def test_last_profile_cannot_be_deleted(make_window, qtbot) -> None:
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    assert not dialog.delete_button.isEnabled()


def test_profile_switch_restores_its_goal(make_window, store, qtbot) -> None:
    s = st.Settings()
    s = st.create_profile(s, "Batch 4k", activate=False)
    batch = replace(
        s.profile("Batch 4k"),
        goal=Goal(use_case="batch", context_tokens=4096, users=16),
    )
    s = st.update_profile(s, batch)
    store.save(s)
    w = make_window()
    assert w.planner.request().goal.context_tokens == 8192
    w.profile_control.switch_profile("Batch 4k")
    goal = w.planner.request().goal
    assert (goal.use_case, goal.context_tokens, goal.users) == ("batch", 4096, 16)
    qtbot.waitUntil(lambda: "16 users" in w.planner.heading.text(), timeout=15_000)
    assert store.load().settings.active_profile == "Batch 4k"
    # the active profile is restored at the next start
    w2 = make_window()
    assert w2.profile.name == "Batch 4k"
    assert w2.planner.request().goal.users == 16


@pytest.mark.parametrize("content", ["{ this is not json", json.dumps([1, 2])])
def test_corrupted_settings_file_is_kept_aside_and_the_user_told(
    make_window, store, content: str
) -> None:
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(content, encoding="utf-8")
    w = make_window()
    assert w.notice.isVisible()
    text = w.notice.text()
    assert "settings.json.corrupt-" in text and "default settings" in text
    backups = list(store.path.parent.glob("settings.json.corrupt-*"))
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == content
    # the app works with defaults and can save again
    assert w.planner.rows
    w.profile_control.switch_profile("Default")
    assert store.load().warnings == ()


def test_unknown_keys_survive_the_gui(make_window, store) -> None:
    store.path.parent.mkdir(parents=True, exist_ok=True)
    store.path.write_text(
        json.dumps(
            {
                "schema_version": 9,
                "future_flag": {"x": 1},
                "profiles": [{"name": "A", "later": True}],
                "active_profile": "A",
            }
        ),
        encoding="utf-8",
    )
    w = make_window()
    assert "newer kvpilot" in w.notice.text()
    w.planner.users.setValue(6)  # an edit that is saved
    w.close()
    data = json.loads(store.path.read_text(encoding="utf-8"))
    assert data["future_flag"] == {"x": 1}
    assert data["profiles"][0]["later"] is True
    assert data["profiles"][0]["goal"]["users"] == 6


def test_settings_say_which_vllm_releases_are_supported(qtbot) -> None:
    from kvpilot.core.base import versions
    from kvpilot.core.runtimes.discovery import VllmRuntime

    dialog = SettingsDialog(st.Settings())
    qtbot.addWidget(dialog)
    text = dialog.vllm_support.text()
    assert f"vLLM {versions.short(versions.SUPPORTED_MIN)} to " in text
    assert versions.short(versions.SUPPORTED_MAX) in text
    assert "newest known formats" in text and "last error line" in text
    # a detected release newer than the newest known one is named as such
    newer = VllmRuntime(("/opt/vllm/bin/vllm",), "0.41.0", "path", "/opt/vllm/bin/vllm")
    known = VllmRuntime(("/usr/bin/vllm",), "0.32.0+cpu", "path", "/usr/bin/vllm")
    dialog._on_runtimes([newer, known])
    status = dialog.runtime_status.text()
    assert "vLLM 0.41.0 is newer than the newest release kvpilot knows" in status
    assert "0.32.0+cpu is" not in status


def test_settings_dialog_start_at_login(make_window, store, qtbot, tmp_path, monkeypatch
                                        ) -> None:
    """The dialog's "Start at login" writes the same files as ``kvpilot autostart``, for the
    profile it shows, off the GUI thread; the API key is in neither file."""
    from kvpilot.core.app import autostart

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    section = dialog.autostart
    qtbot.waitUntil(lambda: not section.busy, timeout=10_000)
    assert section.choice.currentData() is None
    assert "nothing of kvpilot starts" in section.state.text().lower()
    dialog.api_key.setText("sk-never-in-a-unit")
    dialog.accept()
    w.profile_control.accept_settings(dialog.result_settings())
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    section = dialog.autostart
    qtbot.waitUntil(lambda: not section.busy, timeout=10_000)
    section.choice.setCurrentIndex(section.choice.findData(autostart.MODE_HEADLESS))
    section.apply()
    qtbot.waitUntil(lambda: not section.busy, timeout=30_000)
    found = autostart.status(config_home=tmp_path / "xdg", query_manager=False)
    assert found.mode == autostart.MODE_HEADLESS and found.profile == dialog._current
    assert "serves headless" in section.state.text()
    written = "".join(p.read_text() for p in (tmp_path / "xdg").rglob("*.service"))
    assert "sk-never-in-a-unit" not in written and "serve --profile" in written
    section.choice.setCurrentIndex(section.choice.findData(autostart.MODE_WINDOW))
    section.apply()
    qtbot.waitUntil(lambda: not section.busy, timeout=30_000)
    assert (tmp_path / "xdg" / "autostart" / "kvpilot.desktop").is_file()
    assert not list((tmp_path / "xdg").rglob("*.service"))
    section.choice.setCurrentIndex(section.choice.findData(None))
    section.apply()
    qtbot.waitUntil(lambda: not section.busy, timeout=30_000)
    assert autostart.status(config_home=tmp_path / "xdg", query_manager=False).mode is None


def test_a_port_outside_the_tcp_range_is_refused_and_the_dialog_stays_open(
    make_window, store, qtbot
) -> None:
    from PySide6.QtCore import Qt

    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.port.clear()
    qtbot.keyClicks(dialog.port, "99999")  # typed as a user types it
    assert dialog.port.value() == 99999  # not cut to 9999
    assert "port: 99999 is not a TCP port" in dialog.problems.text()
    assert not _ok(dialog).isEnabled()
    qtbot.keyClick(dialog, Qt.Key.Key_Return)  # Enter does not take it either
    assert dialog.isVisible() and dialog.result() == 0
    assert store.load().settings.active.port != 99999
    dialog.port.setValue(8124)
    assert _ok(dialog).isEnabled() and dialog.problems.text() == ""


def test_a_vllm_path_that_does_not_exist_is_refused_before_ok(
    make_window, qtbot, tmp_path
) -> None:
    w = make_window()
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    missing = tmp_path / "nowhere" / "bin" / "vllm"
    dialog.runtime.setEditText(str(missing))
    assert f"vLLM: {missing} does not exist" in dialog.problems.text()
    assert "Browse…" in dialog.problems.text()
    assert not _ok(dialog).isEnabled()
    dialog.accept()
    assert dialog.result() == 0
    real = tmp_path / "vllm"
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    dialog.runtime.setEditText(str(real))
    assert _ok(dialog).isEnabled() and "vLLM:" not in dialog.problems.text()


def test_a_profile_added_on_the_command_line_is_the_windows(make_window, store, qtbot,
                                                            monkeypatch, capsys) -> None:
    from kvpilot.core.cli import main

    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    assert main(["profile", "add", "coder", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ",
                 "--gpu", "RTX 4090", "--max-model-len", "16384", "--served-model-name",
                 "coder-7b", "--port", "8102"]) == 0
    w = make_window()
    assert "coder" in w.settings.names
    dialog = w.profile_control.make_settings_dialog()
    qtbot.addWidget(dialog)
    dialog.profiles.setCurrentRow(w.settings.names.index("coder"))
    assert dialog.served_name.text() == "coder-7b" and dialog.port.value() == 8102
    dialog.served_name.setText("coder")
    dialog.accept()
    w.profile_control.accept_settings(dialog.result_settings())
    saved = store.load().settings.profile("coder")
    assert saved.served_model_name == "coder" and saved.plan.max_model_len == 16384
    capsys.readouterr()
    assert main(["profile", "show", "coder", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["served_model_name"] == "coder"
