"""The settings dialog's "Start at login" section: nothing, the window, or headless serving.

It adapts :mod:`kvpilot.core.app.autostart` (the core of ``kvpilot autostart``) for the profile
selected in the dialog; the files are written and the user manager asked on the pool, never on
the GUI thread. The headless server reads the SAVED profile at login, so the section says so.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QVBoxLayout
from shiboken6 import isValid

from kvpilot.core.app import autostart
from kvpilot.core.base.errors import KvpilotError
from kvpilot.gui import theme
from kvpilot.gui.widgets.small import push_button
from kvpilot.gui.workers import run_in_pool

NOTHING = "Nothing"
WINDOW = "Open this window with this profile"
HEADLESS = "Serve this profile without the window (systemd user unit)"
CHOICES: tuple[tuple[str, str | None], ...] = (
    (NOTHING, None), (WINDOW, autostart.MODE_WINDOW), (HEADLESS, autostart.MODE_HEADLESS),
)


class AutostartSection(QGroupBox):
    """``profile()`` names the profile the dialog shows; Apply writes what starts at login."""

    def __init__(self, profile: Callable[[], str]) -> None:
        super().__init__("Start at login")
        self.setObjectName("autostartSection")
        self._profile = profile
        self.choice = QComboBox()
        self.choice.setObjectName("autostartChoice")
        for text, mode in CHOICES:
            self.choice.addItem(text, mode)
        self.choice.setToolTip(
            "The window opens at login (an XDG autostart entry), or kvpilot serves the saved "
            "profile headless under systemd and restarts it after a failure. The API key stays "
            "in the keyring: it is written into neither file."
        )
        self.apply_button = push_button("Apply", name="autostartApply", on_click=self.apply)
        self.state = QLabel("")
        self.state.setObjectName("autostartState")
        self.state.setWordWrap(True)
        self.state.setStyleSheet(f"color: {theme.MUTED}")
        row = QHBoxLayout()
        row.addWidget(self.choice, 1)
        row.addWidget(self.apply_button)
        box = QVBoxLayout(self)
        box.addLayout(row)
        box.addWidget(self.state)
        #: the last status read (None until the pool answered)
        self.status: autostart.AutostartStatus | None = None
        self.busy = False
        self.refresh()

    def refresh(self) -> None:
        """Read what starts at login now (pool) and show it."""
        self._run(lambda: autostart.status())

    def apply(self) -> None:
        """Write the chosen way for the selected profile (pool)."""
        mode = self.choice.currentData()
        name = self._profile()
        if mode is None:
            self._run(lambda: autostart.disable())
        else:
            self._run(lambda: autostart.enable(name, headless=mode == autostart.MODE_HEADLESS))

    def _run(self, fn: Callable[[], autostart.AutostartStatus]) -> None:
        self.busy = True
        self.apply_button.setEnabled(False)
        run_in_pool(fn, self._show, self._failed, owner=self)

    def _show(self, found: autostart.AutostartStatus) -> None:
        self.busy = False
        if not isValid(self):  # the dialog closed before the pool answered
            return
        self.apply_button.setEnabled(True)
        self.status = found
        index = next(i for i, (_, mode) in enumerate(CHOICES) if mode == found.mode)
        self.choice.setCurrentIndex(index)
        text = found.describe()
        if found.mode == autostart.MODE_HEADLESS:
            text += " (the saved profile: press OK to save changes first)"
        self.state.setStyleSheet(f"color: {theme.MUTED}")
        self.state.setText(text[:1].upper() + text[1:])

    def _failed(self, exc: BaseException) -> None:
        self.busy = False
        if not isValid(self):
            return
        self.apply_button.setEnabled(True)
        message = exc.message if isinstance(exc, KvpilotError) else f"could not apply: {exc}"
        self.state.setStyleSheet(f"color: {theme.FAIL}")
        self.state.setText(message)
