"""Finding vLLM for the active profile, and the "Install vLLM" dialog.

Discovery runs on the pool (profile path, ``$KVPILOT_VLLM``, PATH, managed runtimes); until it
answers, and when nothing usable is found, Launch is blocked with the reason (and the offer to
install one). A runtime found calls ``runtime_changed`` (the fit engine's rules depend on its
release); one removed in the dialog calls ``runtime_removed`` with the profiles that pinned it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from kvpilot.gui.controllers import Controller, _nothing

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.gui.dialogs.runtime_install import InstallRuntimeDialog
    from kvpilot.gui.widgets.window_widgets import WindowWidgets

LOOKING = "looking for vLLM…"


class RuntimeController(Controller):
    """Owns the vLLM runtime launches use (None, with ``runtime_problem``, when there is none)."""

    def __init__(self, window: WindowWidgets) -> None:
        super().__init__(window)
        #: called when a runtime was found (the plans depend on its release)
        self.runtime_changed: Callable[[], None] = _nothing
        #: called with the profiles that pinned a runtime removed in the install dialog
        self.runtime_removed: Callable[[list[str]], None] = _nothing
        self.runtime: VllmRuntime | None = None
        self.runtime_problem: str | None = LOOKING

    def discover(self) -> None:
        """Look for vLLM on the pool for the active profile."""
        configured = self.window.profile.vllm_runtime
        self.runtime_problem = LOOKING
        self.window.server_panel.set_launch_blocked(self.runtime_problem)
        self.in_pool(
            lambda: self.services.discover_runtime(configured),
            self.set_runtime,
            self.on_runtime_error,
        )

    def set_runtime(self, runtime: VllmRuntime) -> None:
        """Use ``runtime`` for launches, enable Launch and re-plan for its release."""
        self.runtime = runtime
        self.runtime_problem = None
        self.window.server_panel.set_launch_blocked(None)
        self.say(f"vLLM {runtime.version} at {home_relative(runtime.location)}", 10_000)
        self.runtime_changed()

    def on_runtime_error(self, exc: BaseException) -> None:
        self.runtime = None
        self.runtime_problem = f"vLLM is not installed or not usable: {exc}"
        self.window.server_panel.set_launch_blocked(self.runtime_problem, offer_install=True)

    def make_install_dialog(self, parent: QWidget | None = None) -> InstallRuntimeDialog:
        """The "Install vLLM" dialog; an install, a new default or a removal rediscovers."""
        from kvpilot.gui.dialogs.runtime_install import InstallRuntimeDialog

        window = self.window
        dialog = InstallRuntimeDialog(
            parent or window,
            data_dir=self.services.data_dir,
            nvml_module=self.services.nvml_module(),
            factory=self.services.runtime_installer_factory(),
            profiles=lambda: window.settings.profiles,
        )
        dialog.installed.connect(lambda _rt: self.discover())
        dialog.default_changed.connect(lambda _id: self.discover())
        dialog.removed.connect(lambda _id, pinned_by: self.runtime_removed(list(pinned_by)))
        return dialog

    def open_install(self, *, modal: bool = True) -> InstallRuntimeDialog:
        """The "Install vLLM" dialog (core/runtimes in a worker thread); a verified install
        is picked up by discovery at once."""
        dialog = self.make_install_dialog()
        return self.show_dialog(dialog, modal=modal)


def home_relative(path: str | Path) -> str:
    """``~/.config/kvpilot/settings.json`` rather than the full home path."""
    p = Path(path)
    try:
        return "~/" + str(p.relative_to(Path.home()))
    except ValueError:
        return str(p)
