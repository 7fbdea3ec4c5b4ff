""""Install vLLM": the dialog that runs :class:`kvpilot.core.runtimes.installer.RuntimeInstaller`.

The choice (which build fits the detected driver) is made by core on the thread pool; the install
runs in a Python worker thread; progress, log lines and the outcome come back as Qt signals of
:class:`InstallController` (queued onto the GUI thread), so the event loop never blocks. Cancel
asks core to stop the installer's process tree (also off the GUI thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.errors import KvpilotError, RuntimeInstallCancelled
from kvpilot.core.runtimes.installer import RuntimeInstaller
from kvpilot.core.runtimes.releases import (
    Choice,
    Release,
    choose_for_this_machine,
    format_bytes,
    load_releases,
)
from kvpilot.gui.workers import run_in_pool

InstallerFactory = Callable[..., RuntimeInstaller]


class InstallController(QObject):
    """One install in a worker thread; signals arrive on the GUI thread.

    Signals:
        progress(object): an :class:`~kvpilot.core.runtimes.progress.InstallProgress`.
        line(str): one line of the installer's output.
        finished(object, object): (InstallResult or None, exception or None).
    """

    progress = Signal(object)
    line = Signal(str)
    finished = Signal(object, object)

    def __init__(
        self,
        release: Release,
        *,
        factory: InstallerFactory = RuntimeInstaller,
        data_dir: Path | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.installer = factory(
            release,
            data_dir=data_dir,
            on_progress=self.progress.emit,
            on_line=self.line.emit,
        )
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """True while the worker thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the install in a worker thread."""

        def work() -> None:
            try:
                result = self.installer.run()
            except BaseException as exc:  # noqa: BLE001 - delivered to the GUI thread
                self.finished.emit(None, exc)
            else:
                self.finished.emit(result, None)

        self._thread = threading.Thread(target=work, name="runtime-install", daemon=True)
        self._thread.start()

    def cancel(self) -> None:
        """Ask the installer to stop (its process tree is killed off the GUI thread)."""
        threading.Thread(target=self.installer.cancel, name="runtime-cancel", daemon=True).start()

    def join(self, timeout_s: float) -> bool:
        """Wait for the worker (tests, shutdown); True when it ended."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()


class InstallRuntimeDialog(QDialog):
    """Pick the build (recommended from the GPU), install it with progress, cancel, log.

    Args:
        choose: blocking ``() -> Choice`` run on the pool (default: core's choice for this
            machine with ``nvml_module``).
        factory: builds the installer (tests pass wheel folders through it).
        data_dir: kvpilot's data directory (default: core's).

    Signals:
        installed(object): the :class:`~kvpilot.core.runtimes.store.InstalledRuntime`.
    """

    installed = Signal(object)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        choose: Callable[[], Choice] | None = None,
        factory: InstallerFactory = RuntimeInstaller,
        data_dir: Path | None = None,
        nvml_module: Any | None = None,
        releases: tuple[Release, ...] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Install vLLM")
        self.setObjectName("installRuntimeDialog")
        self._factory = factory
        self._data_dir = data_dir
        self._releases = releases if releases is not None else load_releases()
        self._choose = choose or (
            lambda: choose_for_this_machine(releases=self._releases, nvml_module=nvml_module)
        )
        self.controller: InstallController | None = None
        self._lead = ""
        self.result_runtime: Any | None = None
        self.error: BaseException | None = None

        self.summary = QLabel("Looking at the GPU and driver…")
        self.summary.setObjectName("installSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.release_box = QComboBox()
        self.release_box.setObjectName("installRelease")
        for rel in self._releases:
            extra = f"CUDA {rel.cuda_version}" if rel.cuda_version else "CPU only"
            self.release_box.addItem(
                f"vLLM {rel.version} ({rel.variant}, {extra}, {format_bytes(rel.peak_bytes)})",
                rel,
            )
        self.release_box.currentIndexChanged.connect(self._describe_selected)
        self.progress_bar = QProgressBar()
        self.progress_bar.setObjectName("installProgress")
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        self.status = QLabel("")
        self.status.setObjectName("installStatus")
        self.status.setWordWrap(True)
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.log_toggle = QToolButton()
        self.log_toggle.setText("Show log")
        self.log_toggle.setCheckable(True)
        self.log = QPlainTextEdit()
        self.log.setObjectName("installLog")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)
        self.log.setVisible(False)
        self.log_toggle.toggled.connect(self._toggle_log)

        self.install_button = QPushButton("Install")
        self.install_button.setObjectName("installButton")
        self.install_button.setEnabled(False)
        self.install_button.clicked.connect(self.start_install)
        self.cancel_button = QPushButton("Cancel install")
        self.cancel_button.setObjectName("cancelInstallButton")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_install)
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.close)

        buttons = QHBoxLayout()
        buttons.addWidget(self.log_toggle)
        buttons.addStretch(1)
        buttons.addWidget(self.install_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.close_button)
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(self.release_box)
        lay.addWidget(self.progress_bar)
        lay.addWidget(self.status)
        lay.addWidget(self.log, 1)
        lay.addLayout(buttons)
        self.resize(560, 220)
        run_in_pool(self._choose, self._on_choice, self._on_choice_error)

    # ---------------------------------------------------------------- choice

    def _selected(self) -> Release:
        rel = self.release_box.currentData()
        assert isinstance(rel, Release)
        return rel

    def _select(self, rel: Release) -> None:
        for i in range(self.release_box.count()):
            if self.release_box.itemData(i) == rel:
                self.release_box.setCurrentIndex(i)
                return

    def _on_choice(self, choice: Choice) -> None:
        self._lead = f"Recommended: {choice.reason}. "
        self._select(choice.release)
        self._describe_selected()
        self.install_button.setEnabled(True)

    def _on_choice_error(self, exc: BaseException) -> None:
        message = exc.message if isinstance(exc, KvpilotError) else str(exc)
        self._lead = f"No build fits this machine: {message}. You can still install another. "
        cpu = [i for i in range(self.release_box.count())
               if self.release_box.itemData(i).variant == "cpu"]
        if cpu:
            self.release_box.setCurrentIndex(cpu[0])
        self._describe_selected()
        self.install_button.setEnabled(self.release_box.count() > 0)

    def _describe_selected(self) -> None:
        if self.release_box.count() == 0:
            return
        rel = self._selected()
        how = "measured" if rel.measured else "estimated"
        self.summary.setText(
            f"{self._lead}Installs {rel.requirement} into kvpilot's data folder "
            f"({rel.runtime_id}); needs {format_bytes(rel.peak_bytes)} of free disk while "
            f"installing ({how}), {format_bytes(rel.installed_bytes)} afterwards."
        )

    # ---------------------------------------------------------------- install

    def start_install(self) -> None:
        """Start installing the selected build (progress and log follow)."""
        rel = self._selected()
        self.error = None
        self.log.clear()
        self.controller = InstallController(
            rel, factory=self._factory, data_dir=self._data_dir, parent=self
        )
        self.controller.progress.connect(self._on_progress)
        self.controller.line.connect(self.log.appendPlainText)
        self.controller.finished.connect(self._on_finished)
        self.install_button.setEnabled(False)
        self.release_box.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress_bar.setRange(0, 0)  # busy until the installer says how many packages
        self.status.setText("checking disk, Python and the package index…")
        self.controller.start()

    def cancel_install(self) -> None:
        """Stop the running install (the half-made folder is removed by core)."""
        if self.controller is not None and self.controller.running:
            self.cancel_button.setEnabled(False)
            self.status.setText("cancelling…")
            self.controller.cancel()

    def _on_progress(self, p: Any) -> None:
        if p.packages_total:
            self.progress_bar.setRange(0, p.packages_total)
            self.progress_bar.setValue(min(p.packages_done, p.packages_total))
        if p.phase in ("finishing", "verifying", "done") and p.packages_total:
            self.progress_bar.setValue(p.packages_total)
        self.status.setText(p.describe())

    def _on_finished(self, result: Any, exc: BaseException | None) -> None:
        self.cancel_button.setEnabled(False)
        self.release_box.setEnabled(True)
        if exc is None:
            rt = result.runtime
            self.result_runtime = rt
            self.progress_bar.setRange(0, 1)
            self.progress_bar.setValue(1)
            what = "was already installed" if result.already_installed else "is installed"
            self.status.setText(
                f"vLLM {rt.vllm_version or rt.version} {what} and verified"
                + (" (the default runtime)" if rt.is_default else "")
            )
            self.install_button.setEnabled(False)
            self.installed.emit(rt)
            return
        self.error = exc
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        message = exc.message if isinstance(exc, KvpilotError) else f"{type(exc).__name__}: {exc}"
        prefix = "Cancelled: " if isinstance(exc, RuntimeInstallCancelled) else "Failed: "
        self.status.setText(prefix + message)
        self.install_button.setEnabled(True)

    def _toggle_log(self, shown: bool) -> None:
        self.log.setVisible(shown)
        self.log_toggle.setText("Hide log" if shown else "Show log")

    def closeEvent(self, event: Any) -> None:
        if self.controller is not None and self.controller.running:
            answer = QMessageBox.question(
                self,
                "Cancel the install?",
                "vLLM is still being installed. Cancel the install and remove what was "
                "installed so far?",
            )
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
            self.cancel_install()
        super().closeEvent(event)
