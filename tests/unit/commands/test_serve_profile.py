"""``kvpilot serve --profile NAME``: the profile's launch, and the errors before any launch."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvpilot.core import cli
from kvpilot.core.app.profile_launch import fallback_policy, load_profile, profile_spec
from kvpilot.core.app.settings import Profile, Settings, SettingsStore
from kvpilot.core.base.plan import PlanInputs, ServingSettings
from kvpilot.core.commands import serve
from kvpilot.core.vllm.command import build_command

KEY = "sk-profile-secret-0123"


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "config"
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(folder))
    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    return folder


def _save(config_dir: Path, *profiles: Profile) -> None:
    SettingsStore(config_dir).save(Settings(profiles=profiles, active_profile=profiles[0].name))


def _profile(model: str, **kw: object) -> Profile:
    plan = ServingSettings(max_model_len=1024, max_num_seqs=4, kv_cache_memory_bytes=64 << 20,
                        enforce_eager=True, dtype="float32")
    values: dict[str, object] = {"name": "tiny", "model_ref": model, "plan": plan,
                                 "port": 18555, "api_key": KEY,
                                 "extra_args": "--seed 7", "auto_fallback": True}
    values.update(kw)
    return Profile(**values)  # type: ignore[arg-type]


def test_unknown_profile_is_a_clear_error(config_dir: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    _save(config_dir, _profile("/nowhere"))
    assert cli.main(["serve", "--profile", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no profile called 'nope'" in err and "'tiny'" in err


def test_damaged_settings_is_a_clear_error(config_dir: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    config_dir.mkdir(parents=True)
    (config_dir / "settings.json").write_text("{ not json", encoding="utf-8")
    assert cli.main(["serve", "--profile", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "settings file is damaged" in err and "not valid JSON" in err
    assert list(config_dir.glob("settings.json.corrupt-*")), "the damaged file is kept aside"


def test_profile_without_model_and_both_sources(config_dir: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    _save(config_dir, _profile(""))
    assert cli.main(["serve", "--profile", "tiny"]) == 2
    assert "names no model" in capsys.readouterr().err
    assert cli.main(["serve", "--profile", "tiny", "--model", "x"]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["serve"]) == 2
    assert "--profile NAME" in capsys.readouterr().err


def test_profile_spec_carries_every_profile_setting(config_dir: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    _save(config_dir, _profile(str(model)))
    loaded = load_profile("tiny")
    assert loaded.profile.api_key == KEY  # from the secrets store, not the argv
    parser = cli.build_parser("serve")
    args = parser.parse_args(["serve", "--profile", "tiny"])
    args, profile = serve.args_for_profile(args)
    assert args.model == str(model) and args.port == 18555
    spec = serve.build_spec(args, args.port, profile)
    assert (spec.max_model_len, spec.max_num_seqs, spec.kv_cache_memory_bytes) == (
        1024, 4, 64 << 20)
    assert spec.enforce_eager and spec.dtype == "float32" and spec.extra_args == ("--seed", "7")
    assert spec.api_key == KEY and spec.port == 18555
    assert fallback_policy(profile).automatic
    command = build_command(spec)
    assert KEY not in " ".join(command.argv) and command.env["VLLM_API_KEY"] == KEY
    assert KEY not in command.redacted()


def test_a_context_the_profile_leaves_open_is_its_goals(config_dir: Path, tmp_path: Path) -> None:
    """A profile that fixes no --max-model-len / --max-num-seqs serves its goal's context and
    users, as the window's plans of that goal do."""
    from dataclasses import replace as dc_replace

    from kvpilot.core.app.profile_launch import profile_settings
    from kvpilot.core.base.goal import Goal

    model = tmp_path / "model"
    model.mkdir()
    open_plan = ServingSettings(kv_cache_memory_bytes=64 << 20, enforce_eager=True)
    profile = dc_replace(_profile(str(model)), plan=open_plan,
                         goal=Goal(context_tokens=2048, users=3))
    settings = profile_settings(profile)
    assert (settings.max_model_len, settings.max_num_seqs) == (2048, 3)
    assert settings.kv_cache_memory_bytes == 64 << 20 and settings.enforce_eager
    _save(config_dir, profile)
    args = cli.build_parser("serve").parse_args(["serve", "--profile", "tiny"])
    args, loaded = serve.args_for_profile(args)
    spec = serve.build_spec(args, args.port, loaded)
    assert (spec.max_model_len, spec.max_num_seqs) == (2048, 3)


def test_window_and_cli_build_the_same_spec(config_dir: Path, tmp_path: Path) -> None:
    """The window's launch (a plan) and the CLI's (the settings) go through one function."""
    from kvpilot.core.hardware.target import cpu_target
    from kvpilot.core.models.local import load_local_model

    tiny = Path(__file__).resolve().parents[2] / "data" / "models"
    config = next(p for p in sorted(tiny.rglob("config.json")) if "llama" in str(p).lower())
    profile = _profile(str(config.parent))
    spec_cli = profile_spec(profile, str(config.parent), profile.plan.settings)
    inputs: PlanInputs = cpu_target().plan_inputs(
        load_local_model(str(config.parent)), "0.32.0", spec_cli)
    spec_gui = profile_spec(profile, str(config.parent), inputs)
    assert spec_gui.settings_changes(spec_cli) == {}
    assert (spec_gui.api_key, spec_gui.port, spec_gui.extra_args) == (
        spec_cli.api_key, spec_cli.port, spec_cli.extra_args)


def test_auto_utilization_is_the_planners(config_dir: Path) -> None:
    """A profile on "auto" utilization launches with what the window's planner plans with on
    the memory free now; a fixed one, a fixed KV size and the CPU backend keep theirs."""
    from dataclasses import replace as dc_replace

    from kvpilot.core.app.profile_launch import auto_utilization
    from kvpilot.core.base.plan import ServingSettings as Plan
    from kvpilot.core.fit.recommend import utilization_for
    from kvpilot.core.hardware.target import cpu_target, from_size

    gpu = from_size(24 << 30, 20 << 30, name="RTX 4090")
    auto = Profile(name="a", model_ref="m", plan=Plan(gpu_memory_utilization=None))
    util = auto_utilization(auto, gpu)
    assert util is not None and util == utilization_for(gpu.card())
    assert util < 0.9  # 4 GiB of the 24 are taken: vLLM's 0.9 would be refused
    assert auto_utilization(dc_replace(auto, plan=Plan(gpu_memory_utilization=0.8)), gpu) is None
    fixed_kv = dc_replace(auto, plan=Plan(kv_cache_memory_bytes=1 << 30))
    assert auto_utilization(fixed_kv, gpu) is None
    assert auto_utilization(auto, cpu_target()) is None


def test_a_locked_keyring_is_no_reason_to_serve_without_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """At login the keyring may still be locked: the headless serve says so and exits 1 (the
    unit tries again later), instead of serving the profile with no API key."""
    import keyring
    from fakes.memory_keyring import MemoryKeyring

    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_SECRETS", "keyring")
    before = keyring.get_keyring()
    ring = MemoryKeyring()
    keyring.set_keyring(ring)
    try:
        _save(tmp_path / "config", _profile(str(tmp_path)))
        assert KEY in ring.passwords.values()  # the key is in the keyring, not the file
        ring.locked = True
        assert cli.main(["serve", "--profile", "tiny"]) == 1
        err = capsys.readouterr().err
        assert "API key of profile 'tiny' could not be read" in err and "unlock" in err
    finally:
        keyring.set_keyring(before)
