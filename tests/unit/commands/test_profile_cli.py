"""``kvpilot profile list|show|add|edit|remove``: the window's records from the command line,
planned as ``kvpilot plan`` plans them before they are saved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.core.app.settings import SettingsStore
from kvpilot.core.cli import main

pytestmark = pytest.mark.usefixtures("isolated_cli")
AWQ = "Qwen/Qwen2.5-7B-Instruct-AWQ"  # a catalog id: planned without files


@pytest.fixture
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "config"
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(folder))
    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("KVPILOT_API_KEY", raising=False)
    return folder


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_add_show_list_edit_remove_share_the_windows_file(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["profile", "add", "coder", "--model", AWQ, "--gpu", "RTX 4090",
               "--max-model-len", "16384", "--max-num-seqs", "8", "--kv-cache-dtype", "fp8",
               "--served-model-name", "coder", "--port", "8101"])
    out = capsys.readouterr().out
    assert rc == 0 and "profile 'coder' added: fits" in out
    # the very records the window reads
    saved = SettingsStore(config_dir).load().settings.profile("coder")
    assert saved.model_ref == AWQ and saved.served_model_name == "coder" and saved.port == 8101
    assert (saved.plan.max_model_len, saved.plan.max_num_seqs, saved.plan.kv_cache_dtype) == (
        16384, 8, "fp8")
    shown = _json(capsys, "profile", "show", "coder", "--json")
    assert shown["plan"]["max_model_len"] == 16384 and shown["served_model_name"] == "coder"
    assert shown["api_key_set"] is False and "api_key" not in shown

    # edit changes only the flags given
    assert main(["profile", "edit", "coder", "--gpu", "RTX 4090", "--max-num-seqs", "4"]) == 0
    edited = SettingsStore(config_dir).load().settings.profile("coder")
    assert edited.plan.max_num_seqs == 4 and edited.plan.max_model_len == 16384
    assert edited.plan.kv_cache_dtype == "fp8" and edited.port == 8101

    listed = _json(capsys, "profile", "list", "--json")
    assert [p["name"] for p in listed["profiles"]] == ["Default", "coder"]
    assert listed["active_profile"] == "Default"

    assert main(["profile", "edit", "coder", "--gpu", "RTX 4090", "--rename", "code"]) == 0
    assert main(["profile", "remove", "code"]) == 0
    assert SettingsStore(config_dir).load().settings.names == ("Default",)


def test_a_plan_that_does_not_fit_is_refused_with_the_reason_unless_forced(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["profile", "add", "huge", "--model", AWQ, "--gpu", "RTX 4090",
            "--max-model-len", "131072", "--max-num-seqs", "64"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "profile 'huge' not saved: the plan does not fit" in err and "--force" in err
    assert "Traceback" not in err
    assert "huge" not in SettingsStore(config_dir).load().settings.names
    assert main([*argv, "--force"]) == 0
    assert "saved anyway" in capsys.readouterr().out
    assert "huge" in SettingsStore(config_dir).load().settings.names


def test_wide_host_without_key_and_key_from_the_environment(
    config_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["profile", "add", "lan", "--model", AWQ, "--gpu", "RTX 4090",
            "--max-model-len", "8192", "--host", "0.0.0.0"]
    assert main(base) == 2
    assert "set an API key or use host 127.0.0.1" in capsys.readouterr().err
    monkeypatch.setenv("KVPILOT_API_KEY", "sk-lan-0123")
    assert main([*base, "--api-key-from-env"]) == 0
    saved = SettingsStore(config_dir).load().settings.profile("lan")
    assert saved.api_key == "sk-lan-0123"
    shown = _json(capsys, "profile", "show", "lan", "--json")
    assert shown["api_key_set"] is True and "sk-lan-0123" not in json.dumps(shown)


def test_unknown_profile_and_bad_flag_are_one_line(
    config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no profile named 'nope'" in err and err.count("\n") == 1
    assert main(["profile", "add", "x", "--model", AWQ, "--gpu", "RTX 4090",
                 "--max-num-seqs", "0"]) == 2
    assert "--max-num-seqs must be at least 1" in capsys.readouterr().err
