"""Autostart at login: the XDG autostart entry, the systemd user unit (checked by
``systemd-analyze --user verify`` where it runs), no secret in any file, and the CLI."""

from __future__ import annotations

import configparser
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from kvpilot.core.app import autostart
from kvpilot.core.app.desktop import launcher_argv
from kvpilot.core.app.settings import Profile, Settings, SettingsStore
from kvpilot.core.cli import main as cli_main

KEY = "sk-autostart-secret-91"
TOKEN = "hf_autostartTOKEN42"
ODD = 'tiny cpu 100% $HOME "q"'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config_home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_SECRETS", "settings-file")
    # secrets in this environment must not leak into what is written for later logins
    monkeypatch.setenv("KVPILOT_API_KEY", KEY)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    SettingsStore(tmp_path / "config").save(Settings(
        profiles=(Profile(name=ODD, model_ref="/models/tiny", api_key=KEY, hf_token=TOKEN),
                  Profile(name="Default")),
        active_profile="Default",
    ))
    return config_home


def _exec_start(unit: Path) -> list[str]:
    """ExecStart as systemd splits it (C-style quotes; %% and $$ stand for % and $)."""
    line = next(ln for ln in unit.read_text().splitlines() if ln.startswith("ExecStart="))
    return [a.replace("%%", "%").replace("$$", "$") for a in shlex.split(line[10:])]


def _all_written(root: Path) -> str:
    return "".join(p.read_text() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_headless_unit_serves_the_profile_and_restarts_with_limits(home: Path) -> None:
    found = autostart.enable(ODD, headless=True, reload=False)
    assert found.mode == autostart.MODE_HEADLESS and found.profile == ODD
    unit = home / "systemd" / "user" / "kvpilot-serve.service"
    assert found.unit_file == unit
    link = home / "systemd" / "user" / "default.target.wants" / "kvpilot-serve.service"
    assert link.is_symlink() and link.resolve() == unit.resolve()
    assert _exec_start(unit) == [*launcher_argv(), "serve", "--profile", ODD]
    parsed = configparser.ConfigParser(interpolation=None, strict=False)
    parsed.optionxform = str  # type: ignore[assignment,method-assign]
    parsed.read_string(unit.read_text())
    service = parsed["Service"]
    assert service["Restart"] == "on-failure"
    assert int(service["RestartSec"]) >= 10
    assert service["RestartPreventExitStatus"] == "2"
    assert int(parsed["Unit"]["StartLimitBurst"]) <= 5
    assert int(parsed["Unit"]["StartLimitIntervalSec"]) >= 5 * int(service["RestartSec"])
    assert parsed["Install"]["WantedBy"] == "default.target"
    text = _all_written(home)
    assert KEY not in text and TOKEN not in text
    assert "KVPILOT_API_KEY" not in text and "HF_TOKEN" not in text
    assert f'"KVPILOT_CONFIG_DIR={os.environ["KVPILOT_CONFIG_DIR"]}"' in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (tests/run installs systemd)")
def test_unit_passes_systemd_analyze_verify(home: Path, tmp_path: Path) -> None:
    autostart.enable(ODD, headless=True, reload=False)
    unit = home / "systemd" / "user" / "kvpilot-serve.service"
    runtime_dir = tmp_path / "run"
    runtime_dir.mkdir(mode=0o700)
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir)}
    done = subprocess.run(["systemd-analyze", "--user", "verify", str(unit)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    if "Failed to initialize manager" in done.stderr:
        pytest.skip(f"systemd-analyze cannot run here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0, done.stderr
    assert "kvpilot-serve.service" not in done.stderr, done.stderr  # no warning about it
    # the check is real: a broken unit beside it is refused
    bad = unit.with_name("broken.service")
    bad.write_text("[Service]\nExecStart=/no/such/kvpilot serve\nRestart=sometimes\n")
    worse = subprocess.run(["systemd-analyze", "--user", "verify", str(bad)], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert worse.returncode != 0 and "restart" in worse.stderr.lower()


def test_window_entry_opens_the_profile_and_replaces_the_unit(home: Path) -> None:
    autostart.enable(ODD, headless=True, reload=False)
    found = autostart.enable(ODD, headless=False, reload=False)
    assert found.mode == autostart.MODE_WINDOW and found.profile == ODD
    entry = home / "autostart" / "kvpilot.desktop"
    assert found.desktop_file == entry
    assert not (home / "systemd" / "user" / "kvpilot-serve.service").exists()
    assert not (home / "systemd" / "user" / "default.target.wants" / "kvpilot-serve.service"
                ).is_symlink()
    lines = dict(ln.split("=", 1) for ln in entry.read_text().splitlines() if "=" in ln)
    assert lines["Type"] == "Application" and lines["TryExec"] == launcher_argv()[0]
    exec_line = lines["Exec"]
    # desktop quoting: \\" is a quote inside the argument, %% a percent sign
    assert exec_line.startswith(" ".join(launcher_argv()) + " gui --profile ")
    assert '"tiny cpu 100%% \\\\$HOME \\\\"q\\\\""' in exec_line
    text = _all_written(home)
    assert KEY not in text and TOKEN not in text


def test_disable_and_status(home: Path) -> None:
    assert autostart.status(query_manager=False).mode is None
    autostart.enable(ODD, headless=True, reload=False)
    assert autostart.status(query_manager=False).profile == ODD
    gone = autostart.disable(reload=False)
    assert gone.mode is None
    assert autostart.status(query_manager=False).describe() == "nothing of kvpilot starts at login"
    assert not list((home / "systemd").rglob("kvpilot-serve.service"))
    with pytest.raises(autostart.AutostartError):
        autostart.enable("  ", headless=True, reload=False)


def test_cli_enable_status_disable(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["autostart", "enable", "--profile", "nope", "--headless"]) == 2
    assert "no profile called 'nope'" in capsys.readouterr().err
    assert not (home / "systemd").exists()
    assert cli_main(["autostart", "enable", "--profile", ODD, "--headless"]) == 0
    out = capsys.readouterr().out
    assert "serves headless" in out and "kvpilot-serve.service" in out
    assert cli_main(["autostart", "status", "--json"]) == 0
    import json

    status = json.loads(capsys.readouterr().out)
    assert status["mode"] == "headless" and status["profile"] == ODD
    # a profile without a model can open the window at login, not serve headless
    assert cli_main(["autostart", "enable", "--profile", "Default", "--headless"]) == 2
    assert "names no model" in capsys.readouterr().err
    assert cli_main(["autostart", "enable", "--profile", "Default"]) == 0
    capsys.readouterr()
    assert cli_main(["autostart", "disable"]) == 0
    assert "nothing of kvpilot starts at login" in capsys.readouterr().out


def test_a_headless_front_at_login(tmp_path: Path) -> None:
    argv = ["/opt/kvpilot/kvpilot"]
    found = autostart.enable("coder", headless=True, config_home=tmp_path, argv=argv,
                             reload=False, front=("coder", "chat 2"), front_port=8011)
    unit = (tmp_path / "systemd" / "user" / autostart.UNIT_NAME).read_text()
    exec_line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStart="))
    assert exec_line == ('ExecStart=/opt/kvpilot/kvpilot front --profile coder --profile '
                         '"chat 2" --port 8011')
    assert found.mode == autostart.MODE_HEADLESS and found.front == ("coder", "chat 2")
    assert "a front for profiles 'coder', 'chat 2'" in found.describe()
    assert autostart.status(config_home=tmp_path, query_manager=False).front == ("coder",
                                                                                   "chat 2")
    with pytest.raises(autostart.AutostartError, match="add --headless"):
        autostart.enable("coder", headless=False, config_home=tmp_path, argv=argv,
                         reload=False, front=("coder", "chat 2"))
