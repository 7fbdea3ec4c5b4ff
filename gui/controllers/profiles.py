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
from typing import TYPE_CHECKING, Any

from kvpilot.core import settings as st
from kvpilot.core.errors import KvpilotError
from kvpilot.gui.controllers import Controller, _nothing
from kvpilot.gui.controllers.runtimes import RuntimeController, home_relative
from kvpilot.gui.records import Goal

if TYPE_CHECKING:
    from kvpilot.gui.settings_dialog import SettingsDialog
    from kvpilot.gui.window_widgets import WindowWidgets


def goal_of(profile: st.Profile) -> Goal:
    """The planner goal a profile stores."""
    plan = profile.plan
    return Goal(
        use_case=plan.use_case,
        context_tokens=plan.max_model_len or st.DEFAULT_CONTEXT_TOKENS,
        users=plan.max_num_seqs or st.DEFAULT_USERS,
        allow_4bit=plan.allow_4bit,
        kv_cache_dtype=plan.kv_cache_dtype,
        gpu_memory_utilization=plan.gpu_memory_utilization,
        enforce_eager=plan.enforce_eager,
        model_ref=profile.model_ref,
        **adapter_goal_fields(plan),
    )


def with_goal(profile: st.Profile, goal: Goal) -> st.Profile:
    """``profile`` storing ``goal``."""
    plan = replace(
        profile.plan,
        use_case=goal.use_case,
        max_model_len=goal.context_tokens,
        max_num_seqs=goal.users,
        kv_cache_dtype=goal.kv_cache_dtype,
        gpu_memory_utilization=goal.gpu_memory_utilization,
        enforce_eager=goal.enforce_eager,
        allow_4bit=goal.allow_4bit,
        enable_lora=False, max_loras=None, max_lora_rank=None,
        # a drafter the planner's inputs do not offer (set on the command line) is kept
        speculative_config=None if "speculative_method" in adapter_goal_fields(profile.plan)
        or goal.speculative_method else profile.plan.speculative_config,
    )
    plan = replace(plan, **goal.adapter_settings())
    return replace(profile, plan=plan, model_ref=goal.model_ref)


def adapter_goal_fields(plan: st.PlanSettings) -> dict[str, Any]:
    """The planner's LoRA and drafter inputs for the settings a profile stores (a drafter the
    inputs do not offer shows as off)."""
    import json

    fields: dict[str, Any] = {}
    if plan.enable_lora:
        fields["lora_slots"] = plan.max_loras or 1
        fields["lora_rank"] = plan.max_lora_rank or 16
    if plan.speculative_config:
        try:
            config = json.loads(plan.speculative_config)
        except json.JSONDecodeError:
            config = None
        if isinstance(config, dict) and config.get("method") in ("ngram", "mtp"):
            fields["speculative_method"] = config["method"]
            tokens = config.get("num_speculative_tokens")
            fields["speculative_tokens"] = tokens if isinstance(tokens, int) and tokens > 0 else 1
    return fields


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
        window.planner.set_goal(goal_of(p))
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
        if dialog.exec() != dialog.DialogCode.Accepted:
            return None
        return self.accept_settings(dialog.result_settings())

    def make_settings_dialog(self) -> SettingsDialog:
        from kvpilot.gui.settings_dialog import SettingsDialog

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

    def remember_goal(self, goal: Goal) -> None:
        """Store an edited goal in the active profile (saved when it changed)."""
        window = self.window
        p = window.profile
        new = with_goal(p, goal)
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
