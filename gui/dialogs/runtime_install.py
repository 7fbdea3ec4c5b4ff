""""Install vLLM": the dialog that runs :class:`kvpilot.core.runtimes.installer.RuntimeInstaller`.

The choice (which build fits the detected driver) is made by core on the thread pool; the install
runs in a Python worker thread; progress, log lines and the outcome come back as Qt signals of
:class:`InstallController` (queued onto the GUI thread), so the event loop never blocks. Cancel
asks core to stop the installer's process tree (also off the GUI thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPlainTextEdit,
    QProgressBar,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.base.errors import KvpilotError, RuntimeInstallCancelled
from kvpilot.core.base.units import size_text
from kvpilot.core.runtimes import store
from kvpilot.core.runtimes.installer import RuntimeInstaller
from kvpilot.core.runtimes.releases import (
    Choice,
    RuntimeBuild,
    choose_for_this_machine,
    load_releases,
)
from kvpilot.gui.screen_fit import wrap_anywhere
from kvpilot.gui.widgets.small import push_button
from kvpilot.gui.workers import run_in_pool

if TYPE_CHECKING:
    from PySide6.QtGui import QCloseEvent

    from kvpilot.core.runtimes.installer import InstallResult
    from kvpilot.core.runtimes.progress import InstallProgress

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
        release: RuntimeBuild,
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

        profiles: ``() -> profiles`` (objects with ``name`` and ``vllm_runtime``) to find the
            ones that pin a runtime before it is removed.
        confirm: ``(title, text) -> bool`` (default: a Yes/No message box).

    Signals:
        installed(object): the :class:`~kvpilot.core.runtimes.store.InstalledRuntime`.
        removed(object, object): (runtime id, names of the profiles that pinned it).
        default_changed(str): the id of the new default runtime.
    """

    installed = Signal(object)
    removed = Signal(object, object)
    default_changed = Signal(str)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        choose: Callable[[], Choice] | None = None,
        factory: InstallerFactory = RuntimeInstaller,
        data_dir: Path | None = None,
        nvml_module: object | None = None,
        releases: tuple[RuntimeBuild, ...] | None = None,
        profiles: Callable[[], Sequence[Any]] | None = None,
        confirm: Callable[[str, str], bool] | None = None,
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
        self._profiles = profiles or (lambda: ())
        self._confirm = confirm or self._confirm_box
        self.result_runtime: Any | None = None
        self.error: BaseException | None = None

        self.summary = QLabel("Looking at the GPU and driver…")
        self.summary.setObjectName("installSummary")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.summary.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.release_box = QComboBox()
        self.release_box.setObjectName("installRelease")
        for rel in self._releases:
            extra = f"CUDA {rel.cuda_version}" if rel.cuda_version else "CPU only"
            self.release_box.addItem(
                f"vLLM {rel.version} ({rel.variant}, {extra}, {size_text(rel.peak_bytes)})",
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
        self.status.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self.log_toggle = QToolButton()
        self.log_toggle.setText("Show log")
        self.log_toggle.setCheckable(True)
        self.log = QPlainTextEdit()
        self.log.setObjectName("installLog")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(5000)
        self.log.setVisible(False)
        self.log_toggle.toggled.connect(self._toggle_log)

        self.install_button = push_button("Install", name="installButton",
                                          on_click=self.start_install, enabled=False)
        self.cancel_button = push_button("Cancel install", name="cancelInstallButton",
                                         on_click=self.cancel_install, enabled=False)
        self.close_button = push_button("Close", on_click=self.close)

        self.installed_list = QListWidget()
        self.installed_list.setObjectName("installedRuntimes")
        self.installed_list.setMaximumHeight(90)
        self.default_button = push_button("Make default", name="runtimeDefaultButton",
                                          on_click=self.make_selected_default)
        self.remove_button = push_button("Remove…", name="runtimeRemoveButton",
                                         on_click=self.remove_selected)
        manage = QHBoxLayout()
        manage.addWidget(self.installed_list, 1)
        side = QVBoxLayout()
        side.addWidget(self.default_button)
        side.addWidget(self.remove_button)
        side.addStretch(1)
        manage.addLayout(side)

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
        lay.addWidget(QLabel("Installed runtimes:"))
        lay.addLayout(manage)
        lay.addLayout(buttons)
        self.setMinimumWidth(520)
        self.resize(620, 420)
        self.refresh_installed()
        run_in_pool(self._choose, self._on_choice, self._on_choice_error, owner=self)

    # ---------------------------------------------------------------- choice

    def _selected(self) -> RuntimeBuild:
        rel = self.release_box.currentData()
        assert isinstance(rel, RuntimeBuild)
        return rel

    def _select(self, rel: RuntimeBuild) -> None:
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
        self.summary.setText(wrap_anywhere(
            f"{self._lead}Installs {rel.requirement} into kvpilot's data folder "
            f"({rel.runtime_id}); needs {size_text(rel.peak_bytes)} of free disk while "
            f"installing ({how}), {size_text(rel.installed_bytes)} afterwards."
        ))

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

    def _on_progress(self, p: InstallProgress) -> None:
        if p.packages_total:
            self.progress_bar.setRange(0, p.packages_total)
            self.progress_bar.setValue(min(p.packages_done, p.packages_total))
        if p.phase in ("finishing", "verifying", "done") and p.packages_total:
            self.progress_bar.setValue(p.packages_total)
        self.status.setText(p.describe())

    def _on_finished(self, result: InstallResult | None, exc: BaseException | None) -> None:
        self.cancel_button.setEnabled(False)
        self.release_box.setEnabled(True)
        if exc is None and result is not None:
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
            self.refresh_installed()
            self.installed.emit(rt)
            return
        exc = exc or RuntimeError("the installer returned nothing")
        self.error = exc
        self.progress_bar.setRange(0, 1)
        self.progress_bar.setValue(0)
        message = exc.message if isinstance(exc, KvpilotError) else f"{type(exc).__name__}: {exc}"
        prefix = "Cancelled: " if isinstance(exc, RuntimeInstallCancelled) else "Failed: "
        self.status.setText(wrap_anywhere(prefix + message))
        self.install_button.setEnabled(True)

    # ---------------------------------------------------------------- installed runtimes

    def refresh_installed(self) -> None:
        """Re-read the runtimes folder into the list."""
        self.installed_list.clear()
        for rt in store.list_installed(self._data_dir):
            state = "default" if rt.is_default else ("ok" if rt.usable else str(rt.problem))
            item = QListWidgetItem(f"{rt.runtime_id}  vLLM {rt.vllm_version or rt.version}"
                                   f"  ({state})")
            item.setData(Qt.ItemDataRole.UserRole, rt.runtime_id)
            self.installed_list.addItem(item)
        has = self.installed_list.count() > 0
        if has:
            self.installed_list.setCurrentRow(0)
        self.default_button.setEnabled(has)
        self.remove_button.setEnabled(has)

    def _selected_installed(self) -> store.InstalledRuntime | None:
        item = self.installed_list.currentItem()
        if item is None:
            return None
        return store.get_installed(str(item.data(Qt.ItemDataRole.UserRole)), self._data_dir)

    def make_selected_default(self) -> None:
        """Make the selected runtime the default (refused, with the reason, when broken)."""
        rt = self._selected_installed()
        if rt is None:
            return
        try:
            store.set_default(rt.runtime_id, self._data_dir)
        except KvpilotError as exc:
            self.status.setText(exc.message)
            return
        self.status.setText(f"default runtime: {rt.runtime_id}")
        self.refresh_installed()
        self.default_changed.emit(rt.runtime_id)

    def remove_selected(self) -> None:
        """Remove the selected runtime after asking (naming the profiles that pin it)."""
        rt = self._selected_installed()
        if rt is None:
            return
        users = store.profiles_using(self._profiles(), rt)
        size = f" ({size_text(rt.size_bytes)})" if rt.size_bytes else ""
        text = f"Delete vLLM {rt.runtime_id}{size} from {rt.path}?"
        if users:
            text += (
                f"\n\nProfile(s) {', '.join(users)} use this runtime; they will detect vLLM "
                "automatically afterwards."
            )
        if not self._confirm("Remove vLLM runtime?", text):
            return
        self.remove_button.setEnabled(False)
        self.status.setText(f"removing {rt.runtime_id}…")
        data_dir = self._data_dir

        def work() -> str:
            store.remove_runtime(rt.runtime_id, data_dir=data_dir, used_by=users, force=True)
            return rt.runtime_id

        def done(runtime_id: str) -> None:
            self.status.setText(f"removed {runtime_id}")
            self.refresh_installed()
            self.removed.emit(runtime_id, users)

        def failed(exc: BaseException) -> None:
            self.status.setText(exc.message if isinstance(exc, KvpilotError) else str(exc))
            self.refresh_installed()

        run_in_pool(work, done, failed, owner=self)

    def _confirm_box(self, title: str, text: str) -> bool:
        answer = QMessageBox.question(self, title, text)
        return answer == QMessageBox.StandardButton.Yes

    def _toggle_log(self, shown: bool) -> None:
        self.log.setVisible(shown)
        self.log_toggle.setText("Hide log" if shown else "Show log")

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.controller is not None and self.controller.running:
            if not self._confirm(
                "Cancel the install?",
                "vLLM is still being installed. Cancel the install and remove what was "
                "installed so far?",
            ):
                event.ignore()
                return
            self.cancel_install()
        super().closeEvent(event)
