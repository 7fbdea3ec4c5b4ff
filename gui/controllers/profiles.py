"""The active profile: the goal it restores, switching profiles, the settings dialog, saving.

The window's ``settings`` are the document; this controller replaces them (a switch, an
edited goal, the dialog's result), saves them through the store and applies the active
profile to the widgets: its goal, theme and sampling rate, then rediscovers vLLM and re-plans.
A failed save is shown in the notice above the window, never lost silently. ``goal_restored``
is called when a profile's goal replaced the planner's (re-plan).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from kvpilot.core.app import settings as st
from kvpilot.core.base.errors import KvpilotError
from kvpilot.gui.controllers import Controller, _nothing
from kvpilot.gui.controllers.runtimes import RuntimeController, home_relative
from kvpilot.gui.records import PlanRequest

if TYPE_CHECKING:
    from kvpilot.gui.dialogs.settings_dialog import SettingsDialog
    from kvpilot.gui.widgets.window_widgets import WindowWidgets


def request_of(profile: st.Profile) -> PlanRequest:
    """What the planner is asked for a profile: its goal, fixed settings and model."""
    return PlanRequest(profile.goal, profile.plan, profile.model_ref)


def with_request(profile: st.Profile, request: PlanRequest) -> st.Profile:
    """``profile`` storing the planner's ``request`` (the goal without the release planned
    for, which follows the runtime)."""
    goal = replace(request.goal, vllm_version=profile.goal.vllm_version,
                   model_filter=profile.goal.model_filter)
    return replace(profile, goal=goal, plan=request.pinned, model_ref=request.model_ref)


class ProfileController(Controller):
    """Applies, switches, edits and saves the window's settings."""

    def __init__(self, window: WindowWidgets, runtimes: RuntimeController) -> None:
        super().__init__(window)
        self.runtimes = runtimes
        #: called when the active profile's goal was put in the planner (after start-up)
        self.goal_restored: Callable[[], None] = _nothing

    def apply_profile(self, initial: bool = False) -> None:
        """Show the active profile: the profile list, its goal, theme and sampling rate; after
        start-up also rediscover vLLM (the profile may pin one) and re-plan."""
        window = self.window
        p = window.profile
        combo = window.profile_combo
        combo.blockSignals(True)
        combo.clear()
        combo.addItems(list(window.settings.names))
        combo.setCurrentText(p.name)
        combo.blockSignals(False)
        window.planner.set_request(request_of(p))
        if not initial:
            from PySide6.QtWidgets import QApplication

            from kvpilot.gui import theme

            app = QApplication.instance()
            if isinstance(app, QApplication):
                theme.apply_theme(app, p.theme)
        if self.services.gpu_sampler is not None:
            self.services.gpu_sampler.set_rate(min(10.0, max(0.1, p.sampling_hz)))
        if not initial:
            self.runtimes.discover()
            self.goal_restored()

    def on_profile_combo(self, index: int) -> None:
        name = self.window.profile_combo.itemText(index)
        if name and name != self.window.settings.active_profile:
            self.switch_profile(name)

    def switch_profile(self, name: str) -> None:
        """Make ``name`` the active profile, save, and re-plan with its goal."""
        self.window.settings = st.switch_profile(self.window.settings, name)
        self.save()
        self.apply_profile()

    def open_settings(self) -> st.Settings | None:
        """Run the settings dialog; returns the accepted settings (None when cancelled)."""
        dialog = self.make_settings_dialog()
        try:
            if dialog.exec() != dialog.DialogCode.Accepted:
                return None
            return self.accept_settings(dialog.result_settings())
        finally:
            # deleted now, on the GUI thread, not whenever a collection frees its cycles; not
            # deferred either: a quit just after OK closed the window first, and the deferred
            # deletion then repainted a window that had no native window any more
            from shiboken6 import Shiboken

            Shiboken.delete(dialog)

    def make_settings_dialog(self) -> SettingsDialog:
        from kvpilot.gui.dialogs.settings_dialog import SettingsDialog

        window = self.window
        return SettingsDialog(
            window.settings,
            window,
            config_path=home_relative(window.store.path),
            list_runtimes=self.services.list_runtimes,
            open_install=self.runtimes.make_install_dialog,
            secrets_note=window.store.secrets.describe(),
            secrets_choice=window.store.file_fallback_choice(),
            set_file_fallback=lambda on: window.store.set_file_fallback(on, window.settings),
        )

    def accept_settings(self, new: st.Settings) -> st.Settings:
        """Adopt settings edited in the dialog: save them and apply the active profile."""
        self.window.settings = new
        self.save()
        self.apply_profile()
        return new

    def save(self) -> None:
        """Save the settings; a failure is shown in the notice."""
        try:
            self.window.store.save(self.window.settings)
        except KvpilotError as exc:
            self.show_notice(f"Settings not saved: {exc.message}")

    def remember_goal(self, request: PlanRequest) -> None:
        """Store an edited goal (and fixed settings, model) in the active profile (saved when
        it changed)."""
        window = self.window
        p = window.profile
        new = with_request(p, request)
        if new == p:
            return
        try:
            window.settings = st.update_profile(window.settings, new)
        except KvpilotError as exc:
            self.say(exc.message, 10_000)
            return
        self.save()

    def on_runtime_removed(self, pinned_by: list[str]) -> None:
        """Profiles that pinned a removed runtime go back to auto-detect; then rediscover."""
        window = self.window
        for name in pinned_by:
            try:
                window.settings = st.update_profile(
                    window.settings, replace(window.settings.profile(name), vllm_runtime="")
                )
            except KvpilotError:
                continue  # the profile was renamed or deleted meanwhile
        if pinned_by:
            self.save()
            self.apply_profile()
        self.runtimes.discover()

    def show_load_warnings(self, warnings: tuple[st.SettingsWarning, ...]) -> None:
        if warnings:
            self.show_notice("\n".join(w.message for w in warnings))

    def show_notice(self, text: str) -> None:
        self.window.notice.setText(text)
        self.window.notice.setVisible(True)
        self.window.notice_close.setVisible(True)

    def hide_notice(self) -> None:
        self.window.notice.setVisible(False)
        self.window.notice_close.setVisible(False)
