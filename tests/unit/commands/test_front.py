"""``kvpilot front``: the planner's split of the profiles (``--plan-only``), and the errors before
anything starts. The GPU is a recorded RTX 4090 (NVML replay); vLLM a stand-in that only answers
``--version``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kvpilot.core.app.settings import Profile, Settings, SettingsStore
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.cli import main

SMALL = "Qwen/Qwen2.5-1.5B-Instruct"  # catalog ids: planned without files
MID = "Qwen/Qwen2.5-7B-Instruct-AWQ"
BIG = "Qwen/Qwen2.5-32B-Instruct-AWQ"


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             make_fake_vllm: Callable[..., Path]) -> Callable[..., None]:
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    monkeypatch.delenv("KVPILOT_API_KEY", raising=False)
    exe = make_fake_vllm("0.33.0")

    def save(**models: str) -> None:
        plan = ServingSettings(max_model_len=8192, max_num_seqs=4)
        SettingsStore(tmp_path / "config").save(Settings(profiles=tuple(
            Profile(name=name, model_ref=ref, served_model_name=name, plan=plan,
                    vllm_runtime=str(exe))
            for name, ref in models.items()), active_profile=next(iter(models))))

    return save


def _plan(capsys: pytest.CaptureFixture[str], *names: str) -> tuple[int, dict]:
    capsys.readouterr()
    argv = ["front", "--plan-only", "--json"]
    for name in names:
        argv += ["--profile", name]
    rc = main(argv)
    return rc, json.loads(capsys.readouterr().out)


def test_small_profiles_stack_with_the_planned_shares(
    profiles: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    profiles(chat=SMALL, coder=MID)
    rc, out = _plan(capsys, "chat", "coder")
    assert rc == 0 and out["stack_all"] is True
    shares = out["shares"]
    assert set(shares) == {"chat", "coder"}
    assert sum(s["bytes"] for s in shares.values()) <= out["budget_bytes"]
    by_name = {p["profile"]: p for p in out["profiles"]}
    for name, share in shares.items():
        assert by_name[name]["floor_bytes"] <= share["bytes"] <= by_name[name]["want_bytes"]
        assert 0 < share["utilization"] < 1
    # vLLM 0.33.0 on an NVIDIA GPU: idle profiles sleep instead of stopping
    assert out["sleep"]["allowed"] is True


def test_profiles_that_do_not_fit_together_take_turns(
    profiles: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    profiles(big=BIG, coder=MID)
    rc, out = _plan(capsys, "big", "coder")
    assert rc == 1 and out["stack_all"] is False and out["shares"] == {}
    assert "need big" in out["reason"] and "GiB to start" in out["reason"]
    capsys.readouterr()
    assert main(["front", "--plan-only", "--profile", "big", "--profile", "coder"]) == 1
    text = capsys.readouterr().out
    assert "swap: the profiles take turns" in text and "sleep:" in text


def test_errors_before_anything_starts(
    profiles: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    profiles(chat=SMALL, coder=MID)
    assert main(["front", "--profile", "chat", "--profile", "coder", "--host", "0.0.0.0",
                 "--plan-only"]) == 2
    assert "set an API key (KVPILOT_API_KEY) or use host 127.0.0.1" in capsys.readouterr().err
    assert main(["front", "--profile", "chat", "--profile", "chat", "--plan-only"]) == 2
    assert "named twice" in capsys.readouterr().err
    assert main(["front", "--profile", "nope", "--plan-only"]) == 2
    assert "no profile called 'nope'" in capsys.readouterr().err
    assert main(["front", "--profile", "chat", "--idle-unload", "0", "--plan-only"]) == 2
    assert "--idle-unload must be a positive" in capsys.readouterr().err
    assert main(["front", "--profile", "chat", "--max-queue", "0", "--plan-only"]) == 2
    assert "--max-queue must be at least 1" in capsys.readouterr().err


def test_two_profiles_serving_one_name_are_refused(
    profiles: Callable[..., None], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    profiles(chat=SMALL, coder=MID)
    store = SettingsStore(tmp_path / "config")
    settings = store.load().settings
    twin = Profile(name="twin", model_ref=SMALL, served_model_name="chat",
                   vllm_runtime=settings.profile("chat").vllm_runtime)
    store.save(Settings(profiles=(*settings.profiles, twin), active_profile="chat"))
    assert main(["front", "--profile", "chat", "--profile", "twin", "--plan-only"]) == 2
    err = capsys.readouterr().err
    assert "both serve 'chat'" in err and "--served-model-name" in err


def test_a_profile_the_planner_cannot_read_is_served_alone(tmp_path: Path) -> None:
    import sys

    from kvpilot.core.app.front import prepare_member
    from kvpilot.core.hardware.target import from_spec
    from kvpilot.core.runtimes.discovery import VllmRuntime

    card = from_spec("RTX 4090")
    assert card is not None
    runtime = VllmRuntime((sys.executable,), "0.33.0", "env", sys.executable)
    missing = tmp_path / "gone"
    member = prepare_member(Profile(name="local", model_ref=str(missing)), runtime, card,
                            tmp_path)
    assert member.need is None and member.capacity is None and str(missing) in member.plan_problem
    assert member.served_name == str(missing) and member.model == str(missing)
    planned = prepare_member(Profile(name="c", model_ref=SMALL, served_model_name="chat"),
                             runtime, card, tmp_path)
    assert planned.need is not None and planned.need.floor_bytes < planned.need.want_bytes
    assert planned.model == SMALL and planned.served_name == "chat"


def test_the_address_rules_are_a_single_servers() -> None:
    from kvpilot.core.app.front import FrontRequest, check_request
    from kvpilot.core.base.errors import CommandError

    check_request(FrontRequest(profiles=("a",), host="::1"))
    check_request(FrontRequest(profiles=("a",), host="10.0.0.2", api_key="sk-lan-0123"))
    for bad, words in ((FrontRequest(profiles=()), "at least one profile"),
                       (FrontRequest(profiles=("a",), port=0), "out of range"),
                       (FrontRequest(profiles=("a",), host="0.0.0.0", api_key="a key"),
                        "printable ASCII")):
        with pytest.raises(CommandError, match=words):
            check_request(bad)
