"""Settings dialog: profiles (create, duplicate, rename, delete, switch) and per-profile fields.

Works on a copy of :class:`~kvpilot.core.app.settings.Settings`;
:meth:`SettingsDialog.result_settings` returns the edited copy after OK. Validation is the core's
(:func:`~kvpilot.core.app.profiles.problems_here`: the fields, the extra vLLM arguments checked
with the command builder's parser, a vLLM choice that names nothing on this machine); problems
are shown under the form and block OK. Detected vLLM installations are listed with their
versions (found on the thread pool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QListWidget,
    QMessageBox,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import KvpilotError, SettingsError
from kvpilot.gui import theme
from kvpilot.gui.widgets.small import push_button, wrapped_label

if TYPE_CHECKING:
    from kvpilot.core.app.secrets import KeyringConsent
    from kvpilot.core.runtimes.store import InstalledRuntime
    from kvpilot.gui.dialogs.runtime_install import InstallRuntimeDialog

AUTO_RUNTIME = "auto-detect"
#: the keyring file-fallback choice, in words that say what that backend is
FILE_FALLBACK_TEXT = (
    "Keep the API key and HF token in keyring's file fallback (keyrings.alt): a plain-text "
    "file, not encrypted, readable only by you"
)
FILE_FALLBACK_TIP = (
    "No system keyring (Secret Service) is available. Without this, the secrets stay in the "
    "settings file (permissions 0600). With it, they move to keyrings.alt's PlaintextKeyring "
    "file secrets.cfg next to the settings (also 0600, also not encrypted), so the settings "
    "file you copy or share holds none. Applies at once."
)


class SettingsDialog(QDialog):
    """Edit profiles; ``list_runtimes(configured) -> list`` is run on the pool when given."""

    def __init__(
        self,
        settings: st.Settings,
        parent: QWidget | None = None,
        *,
        config_path: str = "",
        list_runtimes: Callable[[str], list[Any]] | None = None,
        ask_name: Callable[[str, str], str | None] | None = None,
        open_install: Callable[[QWidget], Any] | None = None,
        secrets_note: str | None = None,
        secrets_choice: KeyringConsent | None = None,
        set_file_fallback: Callable[[bool], KeyringConsent] | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("kvpilot settings")
        self.setObjectName("settingsDialog")
        self._settings = settings
        self._current: str = settings.active_profile
        self._list_runtimes = list_runtimes
        self._ask_name = ask_name or self._ask_name_dialog
        self._open_install = open_install or _default_open_install
        self._set_file_fallback = set_file_fallback
        self._config_path = config_path
        self._loading = False

        # --- profiles
        self.profiles = QListWidget()
        self.profiles.setObjectName("profileList")
        self.profiles.currentTextChanged.connect(self._on_profile_selected)
        self.new_button = push_button("New", on_click=self._new)
        self.dup_button = push_button("Duplicate", on_click=self._duplicate)
        self.rename_button = push_button("Rename", on_click=self._rename)
        self.delete_button = push_button("Delete", on_click=self._delete)
        self.activate_button = push_button("Use this profile", on_click=self._activate)
        self.active_label = QLabel()
        left = QVBoxLayout()
        left.addWidget(QLabel("Profiles"))
        left.addWidget(self.profiles, 1)
        for b in (
            self.new_button,
            self.dup_button,
            self.rename_button,
            self.delete_button,
            self.activate_button,
        ):
            left.addWidget(b)
        left.addWidget(self.active_label)

        # --- fields
        form = QFormLayout()
        runtime_row = QHBoxLayout()
        self.runtime = QComboBox()
        self.runtime.setObjectName("runtimeCombo")
        self.runtime.setEditable(True)
        self.runtime.addItem(AUTO_RUNTIME, "")
        self.runtime.setToolTip("The vllm executable (or its Python) to launch")
        self.runtime_browse = push_button("Browse…", on_click=self._browse_runtime)
        runtime_row.addWidget(self.runtime, 1)
        runtime_row.addWidget(self.runtime_browse)
        self.runtime_install = push_button(
            "Install vLLM…", name="settingsInstallVllm",
            tooltip="Install a vLLM build that fits this GPU and driver (a managed runtime)",
            on_click=self._install_runtime,
        )
        runtime_row.addWidget(self.runtime_install)
        form.addRow("vLLM", runtime_row)
        self.runtime_status = wrapped_label()
        form.addRow("", self.runtime_status)
        from kvpilot.core.base import versions

        self.vllm_support = QLabel(versions.support_summary())
        self.vllm_support.setObjectName("vllmSupport")
        self.vllm_support.setWordWrap(True)
        self.vllm_support.setStyleSheet("color: palette(mid)")
        form.addRow("", self.vllm_support)
        self.host = QLineEdit()
        self.host.setToolTip("127.0.0.1 keeps the server on this machine")
        form.addRow("Host", self.host)
        self.port = QSpinBox()
        # wider than the TCP range on purpose: a typed 99999 stays 99999 and is refused with
        # the reason (a 1-65535 box dropped the last digit and saved 9999 without a word)
        self.port.setRange(0, 9_999_999)
        form.addRow("Port", self.port)
        self.api_key = QLineEdit()
        self.api_key.setObjectName("apiKey")
        self.api_key.setEchoMode(QLineEdit.EchoMode.Password)
        self.api_key.setPlaceholderText("none")
        form.addRow("API key", self.api_key)
        hf_row = QHBoxLayout()
        self.hf_cache = QLineEdit()
        self.hf_cache.setPlaceholderText("default (~/.cache/huggingface)")
        self.hf_browse = push_button("Browse…", on_click=self._browse_hf)
        hf_row.addWidget(self.hf_cache, 1)
        hf_row.addWidget(self.hf_browse)
        form.addRow("HF cache", hf_row)
        self.hf_token = QLineEdit()
        self.hf_token.setEchoMode(QLineEdit.EchoMode.Password)
        self.hf_token.setPlaceholderText("none (needed for gated models)")
        form.addRow("HF token", self.hf_token)
        self.served_name = QLineEdit()
        self.served_name.setObjectName("servedModelName")
        self.served_name.setPlaceholderText("the model reference")
        self.served_name.setToolTip("the model name clients send (--served-model-name); a "
                                    "front lists and routes the profile by it")
        form.addRow("Served model name", self.served_name)
        self.extra_args = QLineEdit()
        self.extra_args.setObjectName("extraArgs")
        self.extra_args.setPlaceholderText("e.g. --max-cudagraph-capture-size 256")
        form.addRow("Extra vLLM args", self.extra_args)
        self.auto_fallback = QCheckBox("Relaunch with the best fallback by itself")
        self.auto_fallback.setObjectName("autoFallback")
        self.auto_fallback.setToolTip(
            "After a failed launch (out of memory, KV cache too small), relaunch with the first "
            "fallback that keeps the checkpoint, then the next ones in turn until one starts "
            "(at most 8 in a row), instead of waiting for a click on the banner "
            "(kvpilot serve --auto-fallback)"
        )
        form.addRow("On failure", self.auto_fallback)
        self.sampling = QDoubleSpinBox()
        self.sampling.setRange(0.1, st.MAX_SAMPLING_HZ)
        self.sampling.setDecimals(1)
        self.sampling.setSuffix(" Hz")
        form.addRow("Sampling rate", self.sampling)
        self.theme = QComboBox()
        self.theme.addItems(list(st.THEMES))
        form.addRow("Theme", self.theme)
        for w in (self.host, self.api_key, self.hf_cache, self.hf_token, self.extra_args,
                  self.served_name):
            w.textChanged.connect(self._validate)
        self.port.valueChanged.connect(self._validate)
        self.sampling.valueChanged.connect(self._validate)
        self.runtime.currentTextChanged.connect(self._validate)
        self.theme.currentTextChanged.connect(self._validate)
        self.auto_fallback.toggled.connect(self._validate)

        self.problems = QLabel("")
        self.problems.setObjectName("settingsProblems")
        self.problems.setWordWrap(True)
        self.problems.setStyleSheet(f"color: {theme.FAIL}")
        self.storage = QLabel()
        self.storage.setObjectName("secretsStorage")
        self.storage.setWordWrap(True)
        self.storage.setStyleSheet(f"color: {theme.MUTED}")
        self.storage.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._show_storage(
            secrets_choice.description if secrets_choice is not None else secrets_note
        )
        # keyring's file fallback: offered only when no system keyring holds the secrets
        self.file_fallback = QCheckBox(FILE_FALLBACK_TEXT)
        self.file_fallback.setObjectName("secretsFileFallback")
        self.file_fallback.setToolTip(FILE_FALLBACK_TIP)
        offered = secrets_choice is not None and secrets_choice.offered
        self.file_fallback.setVisible(offered and set_file_fallback is not None)
        if secrets_choice is not None:
            self.file_fallback.setChecked(
                secrets_choice.accepted and secrets_choice.kind == "keyring-file"
            )
            if not secrets_choice.available:
                self.file_fallback.setEnabled(False)
                self.file_fallback.setText(
                    f"{FILE_FALLBACK_TEXT} (not available: keyrings.alt is not installed)"
                )
        self.file_fallback.toggled.connect(self._on_file_fallback)

        from kvpilot.gui.dialogs.autostart_section import AutostartSection

        self.autostart = AutostartSection(lambda: self._current)
        right = QVBoxLayout()
        right.addLayout(form)
        right.addWidget(self.problems)
        right.addWidget(self.autostart)
        right.addStretch(1)
        right.addWidget(self.file_fallback)
        right.addWidget(self.storage)

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)

        body = QHBoxLayout()
        lw = QWidget()
        lw.setLayout(left)
        lw.setMaximumWidth(220)
        body.addWidget(lw)
        rw = QWidget()
        rw.setLayout(right)
        body.addWidget(rw, 1)
        outer = QVBoxLayout(self)
        outer.addLayout(body, 1)
        outer.addWidget(self.buttons)
        # tall enough for the wrapped notes at the width the rows need (a fixed height cut
        # them once the dialog grew the autostart and keyring rows)
        hint = self.sizeHint()
        self.resize(max(760, hint.width()), max(520, hint.height()))

        self._reload_list(select=self._current)
        if list_runtimes is not None:
            self._detect_runtimes()

    # ----------------------------------------------------------------- secrets

    def _show_storage(self, note: str | None) -> None:
        self.storage.setText(
            f"{note or st.SECRETS_STORAGE}"
            + (f"<br>Settings file: {self._config_path}" if self._config_path else "")
        )

    def _on_file_fallback(self, checked: bool) -> None:
        """Apply the choice at once (the saved secrets move) and say where they are now."""
        if self._set_file_fallback is None:
            return
        try:
            choice = self._set_file_fallback(checked)
        except KvpilotError as exc:
            self.problems.setText(f"Secrets not moved: {exc.message}")
            self.file_fallback.blockSignals(True)
            self.file_fallback.setChecked(not checked)
            self.file_fallback.blockSignals(False)
            return
        self._show_storage(choice.description)
        if checked and choice.kind != "keyring-file":  # consent recorded, backend unusable
            self.problems.setText(
                "keyring's file fallback could not be used; the secrets stay where they were"
            )

    # ----------------------------------------------------------------- results

    def result_settings(self) -> st.Settings:
        """The edited settings (call after ``exec()`` returned Accepted)."""
        return self._settings

    def accept(self) -> None:
        if not self._commit():
            return
        super().accept()

    # ----------------------------------------------------------------- list

    def _reload_list(self, select: str) -> None:
        self._loading = True
        try:
            self.profiles.clear()
            for name in self._settings.names:
                self.profiles.addItem(name)
            items = self.profiles.findItems(select, Qt.MatchFlag.MatchExactly)
            if items:
                self.profiles.setCurrentItem(items[0])
        finally:
            self._loading = False
        self._current = select
        self._load_fields(self._settings.profile(select))
        self.active_label.setText(f"Active: {self._settings.active_profile}")
        self.delete_button.setEnabled(len(self._settings.profiles) > 1)

    def _on_profile_selected(self, name: str) -> None:
        if self._loading or not name or name == self._current:
            return
        if not self._commit():
            self._loading = True
            items = self.profiles.findItems(self._current, Qt.MatchFlag.MatchExactly)
            if items:
                self.profiles.setCurrentItem(items[0])
            self._loading = False
            return
        self._current = name
        self._load_fields(self._settings.profile(name))

    def _ask_name_dialog(self, title: str, initial: str) -> str | None:
        text, ok = QInputDialog.getText(self, title, "Profile name:", text=initial)
        return text if ok else None

    def _apply(self, fn: Callable[[], st.Settings], select: Callable[[st.Settings], str]) -> None:
        if not self._commit():
            return
        try:
            new = fn()
        except SettingsError as exc:
            QMessageBox.warning(self, "Profiles", exc.message)
            return
        self._settings = new
        self._reload_list(select(new))

    def _new(self) -> None:
        name = self._ask_name("New profile", "")
        if name is not None:
            self._apply(
                lambda: st.create_profile(self._settings, name, activate=False),
                lambda _s: name.strip(),
            )

    def _duplicate(self) -> None:
        name = self._ask_name("Duplicate profile", f"{self._current} copy")
        if name is not None:
            src = self._current
            self._apply(
                lambda: st.duplicate_profile(self._settings, src, name, activate=False),
                lambda _s: name.strip(),
            )

    def _rename(self) -> None:
        name = self._ask_name("Rename profile", self._current)
        if name is not None:
            old = self._current
            self._apply(
                lambda: st.rename_profile(self._settings, old, name), lambda _s: name.strip()
            )

    def _delete(self) -> None:
        victim = self._current
        self._apply(lambda: st.delete_profile(self._settings, victim), lambda s: s.active_profile)

    def _activate(self) -> None:
        name = self._current
        self._apply(lambda: st.switch_profile(self._settings, name), lambda _s: name)

    # ----------------------------------------------------------------- fields

    def _load_fields(self, p: st.Profile) -> None:
        self._loading = True
        try:
            if p.vllm_runtime:
                i = self.runtime.findData(p.vllm_runtime)
                if i < 0:
                    self.runtime.addItem(p.vllm_runtime, p.vllm_runtime)
                    i = self.runtime.count() - 1
                self.runtime.setCurrentIndex(i)
            else:
                self.runtime.setCurrentIndex(0)
            self.host.setText(p.host)
            self.port.setValue(p.port)
            self.api_key.setText(p.api_key)
            self.hf_cache.setText(p.hf_cache_dir)
            self.hf_token.setText(p.hf_token)
            self.extra_args.setText(p.extra_args)
            self.served_name.setText(p.served_model_name)
            self.sampling.setValue(p.sampling_hz)
            self.theme.setCurrentText(p.theme)
            self.auto_fallback.setChecked(p.auto_fallback)
        finally:
            self._loading = False
        self._validate()

    def _runtime_value(self) -> str:
        text = self.runtime.currentText().strip()
        if text == AUTO_RUNTIME or not text:
            return ""
        data = self.runtime.currentData()
        if isinstance(data, str) and self.runtime.itemText(self.runtime.currentIndex()) == text:
            return data
        return text

    def edited_profile(self) -> st.Profile:
        """The profile as the form shows it."""
        base = self._settings.profile(self._current)
        return replace(
            base,
            vllm_runtime=self._runtime_value(),
            host=self.host.text().strip(),
            port=self.port.value(),
            api_key=self.api_key.text(),
            hf_cache_dir=self.hf_cache.text().strip(),
            hf_token=self.hf_token.text().strip(),
            extra_args=self.extra_args.text().strip(),
            served_model_name=self.served_name.text().strip(),
            sampling_hz=round(self.sampling.value(), 1),
            theme=self.theme.currentText(),
            auto_fallback=self.auto_fallback.isChecked(),
        )

    def _validate(self) -> list[str]:
        if self._loading:
            return []
        from kvpilot.core.app.profiles import problems_here

        problems = problems_here(self.edited_profile())
        self.problems.setText("\n".join(problems))
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setEnabled(not problems)
        return problems

    def _commit(self) -> bool:
        if self._validate():
            return False
        try:
            self._settings = st.update_profile(self._settings, self.edited_profile())
        except SettingsError as exc:
            self.problems.setText(exc.message)
            return False
        return True

    def _browse_runtime(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The vllm executable or its python")
        if path:
            self.runtime.addItem(path, path)
            self.runtime.setCurrentIndex(self.runtime.count() - 1)

    def _browse_hf(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Hugging Face cache directory")
        if path:
            self.hf_cache.setText(path)

    def _install_runtime(self) -> None:
        dialog = self._open_install(self)
        if dialog is not None and hasattr(dialog, "installed"):
            dialog.installed.connect(self._on_runtime_installed)
            dialog.show()

    def _on_runtime_installed(self, rt: InstalledRuntime) -> None:
        self.runtime_status.setText(
            f"installed vLLM {rt.vllm_version or rt.version} ({rt.runtime_id}); auto-detect "
            f"finds it, or pick it here to pin this profile to it"
        )
        if self.runtime.findData(rt.runtime_id) < 0:
            self.runtime.addItem(f"{rt.runtime_id}  (managed vLLM {rt.version})", rt.runtime_id)
        if self._list_runtimes is not None:
            self._detect_runtimes()

    def _detect_runtimes(self) -> None:
        from kvpilot.gui.workers import run_in_pool

        assert self._list_runtimes is not None
        configured = self._settings.profile(self._current).vllm_runtime
        self.runtime_status.setText("looking for vLLM installations…")
        lister = self._list_runtimes
        run_in_pool(lambda: lister(configured), self._on_runtimes, self._on_runtimes_error,
                    owner=self)

    def _on_runtimes(self, runtimes: list[Any]) -> None:
        from kvpilot.core.base import versions

        for rt in runtimes:
            label = f"{rt.location}  (vLLM {rt.version}, {rt.source})"
            if self.runtime.findData(rt.location) < 0:
                self.runtime.addItem(label, rt.location)
        if runtimes:
            notes = {n for n in (versions.support_note(r.version) for r in runtimes) if n}
            self.runtime_status.setText(
                "found: "
                + "; ".join(f"vLLM {r.version} at {r.location} ({r.source})" for r in runtimes)
                + "".join(f". {n}" for n in sorted(notes))
            )
        else:
            self.runtime_status.setText(
                "no vLLM found; auto-detect will fail until one is installed"
            )

    def _on_runtimes_error(self, exc: BaseException) -> None:
        self.runtime_status.setText(f"could not list vLLM installations: {exc}")


def _default_open_install(parent: QWidget) -> InstallRuntimeDialog:
    """The "Install vLLM" dialog (not shown yet) for kvpilot's default data folder."""
    from kvpilot.gui.dialogs.runtime_install import InstallRuntimeDialog

    return InstallRuntimeDialog(parent)
