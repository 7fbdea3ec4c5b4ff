"""Offer, once, to add kvpilot to the desktop's application menu (first start of a frozen build).

The decision and the files are core's (:mod:`kvpilot.core.app.desktop`); this only asks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QMessageBox, QWidget

from kvpilot.core.app import desktop
from kvpilot.core.base.errors import KvpilotError


def _ask_box(parent: QWidget | None) -> bool:
    answer = QMessageBox.question(
        parent,
        "Add kvpilot to the application menu?",
        "Add kvpilot to your desktop's application menu (with its icon), so that you can start "
        "it without a terminal? You can remove it later with "
        "`kvpilot install-desktop-entry --uninstall`.",
    )
    return answer == QMessageBox.StandardButton.Yes


def offer_desktop_entry(
    parent: QWidget | None = None,
    *,
    ask: Callable[[QWidget | None], bool] = _ask_box,
    frozen: bool | None = None,
    data_home: Path | None = None,
    data_dir: Path | None = None,
) -> str | None:
    """Ask once; returns what happened in words (None when nothing was offered)."""
    if not desktop.should_offer(data_home, data_dir, frozen=frozen):
        return None
    desktop.mark_offered(data_dir)
    if not ask(parent):
        return "desktop entry not added (kvpilot install-desktop-entry adds it later)"
    try:
        entry = desktop.install_desktop_entry(data_home)
    except KvpilotError as exc:
        return f"desktop entry not added: {exc.message}"
    return f"kvpilot added to the application menu ({entry.desktop_file})"
