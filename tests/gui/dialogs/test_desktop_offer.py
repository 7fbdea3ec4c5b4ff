"""The GUI offers the desktop entry once, on the first start of a frozen build."""

from __future__ import annotations

from pathlib import Path

from kvpilot.gui.dialogs.desktop_offer import offer_desktop_entry


def test_offer_once(qtbot, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    asked: list[object] = []

    def yes(parent: object) -> bool:
        asked.append(parent)
        return True

    said = offer_desktop_entry(None, ask=yes, frozen=True)
    assert said is not None and "added to the application menu" in said
    assert (tmp_path / "share" / "applications" / "kvpilot.desktop").is_file()
    assert offer_desktop_entry(None, ask=yes, frozen=True) is None
    assert len(asked) == 1
    assert offer_desktop_entry(None, ask=yes, frozen=False) is None


def test_declined_offer_is_not_repeated(qtbot, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "share"))
    said = offer_desktop_entry(None, ask=lambda _p: False, frozen=True)
    assert said is not None and "not added" in said
    assert not (tmp_path / "share" / "applications" / "kvpilot.desktop").exists()
    assert offer_desktop_entry(None, ask=lambda _p: True, frozen=True) is None
