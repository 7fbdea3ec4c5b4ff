"""The main window's widgets: header, notices, GPU panel, banner, server panel, tabs, actions.

:class:`WindowWidgets` builds and lays out every widget of the window and owns the settings being
edited; it connects nothing. :class:`~kvpilot.gui.main_window.MainWindow` adds the controllers
(:mod:`kvpilot.gui.controllers`) and wires the widgets' signals to them; the controllers drive
the widgets through this class, so that they depend on the widgets and not on the window that
wires them.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.app import settings as st
from kvpilot.gui import theme
from kvpilot.gui.panels.dashboard_panel import DashboardPanel
from kvpilot.gui.panels.gpu_panel import GpuPanel
from kvpilot.gui.panels.planner_panel import PlannerPanel
from kvpilot.gui.panels.server_panel import LogView, ServerPanel
from kvpilot.gui.services import AppServices
from kvpilot.gui.widgets.fallback_banner import FallbackBanner
from kvpilot.gui.widgets.small import push_button, wrapped_label

SHORTCUT_LAUNCH = "F5"
SHORTCUT_STOP = "Shift+F5"
SHORTCUT_SETTINGS = "Ctrl+,"


class WindowWidgets(QMainWindow):
    """The window's widgets, laid out, and the settings being edited (``settings``)."""

    def __init__(
        self, services: AppServices, store: st.SettingsStore, settings: st.Settings
    ) -> None:
        super().__init__()
        self.setObjectName("mainWindow")
        self.setWindowTitle("kvpilot")
        self.services = services
        self.store = store
        self.settings = settings
        self._build_widgets()
        self._build_actions()

    @property
    def profile(self) -> st.Profile:
        """The active profile."""
        return self.settings.active

    def say(self, text: str, timeout_ms: int = 0) -> None:
        """A status-bar message (``timeout_ms`` 0: until the next one)."""
        self.statusBar().showMessage(text, timeout_ms)

    def _build_widgets(self) -> None:
        self.profile_combo = QComboBox()
        self.profile_combo.setObjectName("profileCombo")
        self.profile_combo.setMinimumWidth(160)
        self.gpu_combo = QComboBox()
        self.gpu_combo.setObjectName("gpuCombo")
        self.gpu_combo.setToolTip("The GPU(s) to plan for, launch on and watch")
        self.gpu_combo.setVisible(False)
        self.gpu_combo_label = QLabel("GPU:")
        self.gpu_combo_label.setVisible(False)
        self.settings_button = push_button(
            "⚙ Settings", name="settingsButton",
            tooltip=f"Profiles, vLLM, host, port, keys ({SHORTCUT_SETTINGS})",
        )
        self.notice = QLabel()
        self.notice.setObjectName("settingsNotice")
        self.notice.setWordWrap(True)
        self.notice.setVisible(False)
        self.notice.setStyleSheet(
            f"background: #fff6df; border: 1px solid {theme.TIGHT}; padding: 4px; color: #202020"
        )
        self.notice_close = QToolButton()
        self.notice_close.setText("✕")
        self.notice_close.setVisible(False)

        self.orphan_bar = QWidget()
        self.orphan_bar.setObjectName("orphanBar")
        self.orphan_label = wrapped_label()
        self.orphan_adopt = QPushButton("Keep it and watch it")
        self.orphan_stop = QPushButton("Stop it")
        ob = QHBoxLayout(self.orphan_bar)
        ob.setContentsMargins(6, 2, 6, 2)
        ob.addWidget(self.orphan_label, 1)
        ob.addWidget(self.orphan_adopt)
        ob.addWidget(self.orphan_stop)
        self.orphan_bar.setStyleSheet(f"#orphanBar {{ border: 1px solid {theme.TIGHT}; }}")
        self.orphan_bar.setVisible(False)

        self.gpu_panel = GpuPanel()
        self.banner = FallbackBanner()
        self.server_panel = ServerPanel()
        self.planner = PlannerPanel()
        self.dashboard = DashboardPanel(self.services.telemetry)
        self.log_view = LogView()
        self.tabs = QTabWidget()
        self.tabs.setObjectName("mainTabs")
        self.tabs.addTab(self.planner, "Plan")
        self.tabs.addTab(self.dashboard, "Dashboard")
        self.tabs.addTab(self.log_view, "Log")

        header = QHBoxLayout()
        header.addWidget(QLabel("<b>kvpilot</b> · profile:"))
        header.addWidget(self.profile_combo)
        header.addWidget(self.gpu_combo_label)
        header.addWidget(self.gpu_combo)
        header.addStretch(1)
        header.addWidget(self.settings_button)
        notice_row = QHBoxLayout()
        notice_row.addWidget(self.notice, 1)
        notice_row.addWidget(self.notice_close, 0, Qt.AlignmentFlag.AlignTop)

        central = QWidget()
        lay = QVBoxLayout(central)
        lay.setContentsMargins(6, 6, 6, 6)
        lay.setSpacing(4)
        lay.addLayout(header)
        lay.addLayout(notice_row)
        lay.addWidget(self.gpu_panel)
        lay.addWidget(self.orphan_bar)
        lay.addWidget(self.banner)
        lay.addWidget(self.server_panel)
        lay.addWidget(self.tabs, 1)
        self.setCentralWidget(central)
        self.statusBar().showMessage("probing the GPU…")

    def _build_actions(self) -> None:
        self.launch_action = QAction("Launch", self)
        self.launch_action.setShortcut(QKeySequence(SHORTCUT_LAUNCH))
        self.stop_action = QAction("Stop", self)
        self.stop_action.setShortcut(QKeySequence(SHORTCUT_STOP))
        self.settings_action = QAction("Settings", self)
        self.settings_action.setShortcut(QKeySequence(SHORTCUT_SETTINGS))
        for a in (self.launch_action, self.stop_action, self.settings_action):
            a.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)
            self.addAction(a)
        self.server_panel.launch_button.setToolTip(f"Launch the selected plan ({SHORTCUT_LAUNCH})")
        self.server_panel.stop_button.setToolTip(f"Stop the server ({SHORTCUT_STOP})")
