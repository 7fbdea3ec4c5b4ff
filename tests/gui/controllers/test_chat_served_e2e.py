"""The Chat tab talks to the server this window launched (marked e2e), with the profile's API
key as the settings store gives it back (the keyring, or its 0600 fallback here): the real vLLM
CPU engine wants that key, so a reply proves it was sent; the key never reaches the
conversation's file or the log."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from e2e.conftest import READY_TIMEOUT_S, scratch_env
from guikit import plan_tiny_model, wait_for_state
from ports import free_port

from kvpilot.core.app import settings as st
from kvpilot.core.chat.store import ConversationStore

pytestmark = pytest.mark.e2e

PROFILE_KEY = "served-chat-key-3"


def test_the_chat_tab_talks_to_this_windows_server_with_the_profiles_key(
    make_window, store: st.SettingsStore, vllm_runtime, tiny_model, vllm_scratch, qtbot,
    tmp_path: Path,
) -> None:
    settings = store.load().settings
    port = free_port(18700)
    profile = replace(settings.active, api_key=PROFILE_KEY, port=port, sampling_hz=2.0)
    store.save(st.update_profile(settings, profile))
    assert PROFILE_KEY not in (tmp_path / "config" / "settings.json").read_text() or (
        store.secrets.in_settings_file
    )

    w = make_window(
        plan_overrides={"kv_cache_memory_bytes": 64 << 20},
        launch_overrides={"dtype": "float32", "hf_offline": True,
                          "extra_env": scratch_env(vllm_scratch)},
        supervisor_options={"ready_timeout_s": READY_TIMEOUT_S},
    )
    assert w.profile.api_key == PROFILE_KEY  # read back through the secret store
    w.runtime_control.set_runtime(vllm_runtime)
    plan_tiny_model(qtbot, w, tiny_model)

    w.tabs.setCurrentWidget(w.chat_panel)
    assert w.chat_panel.target.text().startswith("No server to talk to")
    w.server_control.launch_selected()
    wait_for_state(qtbot, w, "ready", "failed", timeout=int(READY_TIMEOUT_S * 1000))
    assert w.server_panel.state == "ready", w.log_view.visible_text()[-3000:]
    try:
        w.tabs.setCurrentWidget(w.chat_panel)
        panel, chat = w.chat_panel, w.chat_control
        qtbot.waitUntil(lambda: chat.loaded and panel.send_button.isEnabled(), timeout=10_000)
        assert "(this window's server)" in panel.target.text()
        assert chat.target is not None and chat.target.api_key == PROFILE_KEY
        assert not panel.image_button.isVisible()  # a text model
        panel.max_tokens.setValue(8)
        panel.input.setPlainText("hello")
        with qtbot.waitSignal(panel.busy_changed, timeout=180_000,
                              check_params_cb=lambda busy: not busy):
            panel.send_button.click()
        reply = chat.conversation.messages[-1]
        assert reply.error is None, reply.error
        assert reply.stats is not None and 1 <= reply.stats.completion_tokens <= 8
    finally:
        w.server_control.stop_server()
        wait_for_state(qtbot, w, "stopped", "failed", timeout=60_000)
    conv_file = ConversationStore().path(w.profile.name)
    qtbot.waitUntil(conv_file.exists, timeout=10_000)
    assert PROFILE_KEY not in conv_file.read_text()
    log_file = tmp_path / "data" / "logs" / "kvpilot.log"
    if log_file.exists():
        assert PROFILE_KEY not in log_file.read_text()
    # the server is gone: the chat says so when asked again
    assert w.chat_panel.target.text().startswith("No server to talk to")
