"""Opens the "Find on Hugging Face" dialog for the planner's GPU and goal, and plans a hit.

The search the dialog runs is :func:`kvpilot.core.app.search.search_hub` for the planner's
target and goal, kept to the architectures the selected vLLM registers (asked once per runtime
and cached: :func:`kvpilot.core.app.search.runtime_filter`). A picked hit becomes the planner's
model, and the planner plans it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.gui.controllers.gpus import TargetController

if TYPE_CHECKING:
    from kvpilot.core.app.search import SearchResult
    from kvpilot.gui.controllers.gpus import GpuController
    from kvpilot.gui.controllers.runtimes import RuntimeController
    from kvpilot.gui.dialogs.hub_search_dialog import HubSearchDialog
    from kvpilot.gui.widgets.window_widgets import WindowWidgets


class HubSearchController(TargetController):
    """Owns the dialog (one at a time)."""

    def __init__(
        self, window: WindowWidgets, gpus: GpuController, runtimes: RuntimeController
    ) -> None:
        super().__init__(window, gpus, runtimes)
        self.dialog: HubSearchDialog | None = None

    def open(self) -> HubSearchDialog | None:
        """Show the dialog (None when there is no GPU target to badge for yet)."""
        from dataclasses import replace

        from kvpilot.core.base.versions import release_number
        from kvpilot.gui.dialogs.hub_search_dialog import HubSearchDialog

        target = self.gpus.target
        if target is None:
            self.say("The GPU is still being probed; search again in a moment.", 5000)
            return None
        goal = self.window.planner.request().goal
        runtime = self.runtimes.runtime
        fit_goal = replace(goal, vllm_version=release_number(runtime.version)) if runtime else goal

        def search(query: str, sort: str, refresh: bool) -> SearchResult:
            from kvpilot.core.app.search import runtime_filter, search_hub

            registered, note = runtime_filter()
            return search_hub(query, target, fit_goal, sort=sort, registered=registered,
                              runtime_note=note, refresh=refresh)

        context = (f"Badges for {target.short_name}: {goal.context_tokens:,}-token context, "
                   f"{goal.users} users ({goal.use_case}); change them in the planner.")
        if self.dialog is not None:
            self.dialog.close()
        dialog = self.dialog = HubSearchDialog(search, context, self.window)
        dialog.plan_requested.connect(self.plan)
        dialog.show()
        return dialog

    def plan(self, repo: str) -> None:
        """Make ``repo`` the planner's model (the planner replans) and show the planner."""
        self.window.planner.set_model_ref(repo)
        self.window.tabs.setCurrentWidget(self.window.planner)
        if self.dialog is not None:
            self.dialog.close()
