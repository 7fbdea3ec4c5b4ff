"""The launch, the command the window shows and the export read a profile the same way
(``profile_launch_fields``): host, port, API key, extra arguments, Hugging Face cache and token;
the shown command and the export hold no secret."""

from __future__ import annotations

import shlex
from pathlib import Path

from fitkit import fixture_spec, rtx4090

from kvpilot.core.app.settings import Profile
from kvpilot.core.vllm.command import build_command
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.services import AppServices, LaunchRequest

API_KEY = "sk-planted-launch-key-7f3a"
HF_TOKEN = "hf_plantedtoken0123456789"


def test_launch_shown_command_and_export_agree_on_the_profile(tmp_path: Path) -> None:
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop", data_dir=tmp_path / "data")
    inputs = rtx4090(fixture_spec("qwen2.5-7b-instruct", 15 << 30), max_model_len=8192)
    profile = Profile(
        name="lan", host="0.0.0.0", port=8123, api_key=API_KEY, hf_cache_dir=str(tmp_path / "hf"),
        hf_token=HF_TOKEN, extra_args="--seed 7 --chat-template-content-format 'string'",
    )
    model = "Qwen/Qwen2.5-7B-Instruct"
    spec = services.launch_spec(LaunchRequest(inputs=inputs, model=model, profile=profile))
    assert (spec.host, spec.port) == ("0.0.0.0", 8123)
    assert (spec.api_key, spec.hf_token) == (API_KEY, HF_TOKEN)
    assert spec.hf_home == str(tmp_path / "hf")
    launched = build_command(spec)
    shown = services.launch_command_text(inputs, model, profile)
    assert shown == launched.redacted()
    argv = shlex.split(shown.splitlines()[-1])
    for flag, value in (("--host", "0.0.0.0"), ("--port", "8123"), ("--seed", "7"),
                        ("--chat-template-content-format", "string")):
        assert argv[argv.index(flag) + 1] == value
    exported = services.export_text(inputs, model, profile, "command")
    assert "--port 8123" in exported and "--seed 7" in exported
    for text in (shown, exported):
        assert API_KEY not in text and HF_TOKEN not in text
    services.shutdown()
