"""``kvpilot install-desktop-entry [--uninstall]`` and the one-time offer of a frozen build."""

from __future__ import annotations

import configparser
from importlib import resources
from pathlib import Path

import pytest

from kvpilot.core.app import desktop
from kvpilot.core.cli import main


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "share"


def _entry(path: Path) -> dict[str, str]:
    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read(path)
    return dict(cp["Desktop Entry"])


def test_install_and_uninstall_through_the_cli(
    xdg: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install-desktop-entry"]) == 0
    out = capsys.readouterr().out
    path = xdg / "applications" / "kvpilot.desktop"
    assert f"wrote {path}" in out and "5 icons" in out
    entry = _entry(path)
    argv = desktop.launcher_argv()
    assert Path(argv[0]).is_absolute() and Path(argv[0]).exists()
    assert entry["Exec"] == " ".join([*argv, "gui"])
    assert entry["TryExec"] == argv[0]
    assert (entry["Icon"], entry["Type"], entry["Terminal"]) == ("kvpilot", "Application", "false")
    for n in desktop.ICON_SIZES:
        icon = xdg / "icons" / "hicolor" / f"{n}x{n}" / "apps" / "kvpilot.png"
        bundled = (resources.files("kvpilot.resources") / "icons" / f"kvpilot-{n}.png")
        assert icon.read_bytes() == bundled.read_bytes()
    assert desktop.entry_installed()

    assert main(["install-desktop-entry", "--uninstall"]) == 0
    assert f"removed {path} and 5 icon(s)" in capsys.readouterr().out
    assert not path.exists() and not list((xdg / "icons").rglob("*.png"))


def test_frozen_executable_path_and_quoting(xdg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = xdg.parent / "My Apps" / "kvpilot"
    exe.parent.mkdir()
    exe.write_text("")
    monkeypatch.setattr(desktop.sys, "frozen", True, raising=False)
    monkeypatch.setattr(desktop.sys, "executable", str(exe))
    assert desktop.launcher_argv() == [str(exe.resolve())]
    entry = desktop.install_desktop_entry()
    assert entry.exec_line == f'"{exe.resolve()}" gui'


def test_offered_once_and_only_for_a_frozen_build(xdg: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert not desktop.should_offer(frozen=False)
    assert desktop.should_offer(frozen=True)
    desktop.mark_offered()
    assert not desktop.should_offer(frozen=True)
    (data / desktop.OFFERED_MARKER).unlink()
    desktop.install_desktop_entry()
    assert not desktop.should_offer(frozen=True)  # already there


def test_unwritable_data_home_is_one_sentence(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(desktop.DesktopEntryError) as err:
        desktop.install_desktop_entry(blocker / "share")
    assert "cannot write" in str(err.value) and "XDG_DATA_HOME" in str(err.value)
