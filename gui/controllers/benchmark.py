"""The load test of the server in view: this window's once ready, else the watched one.

It runs the core call ``kvpilot bench`` makes (:func:`kvpilot.core.app.loadtest.
run_recorded_load_test`): the window's GPU sampled at 10 Hz during the test, so each level has
its J/token and throttling, and the test kept with this window's run record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvpilot.gui.controllers import Controller

if TYPE_CHECKING:
    from kvpilot.gui.controllers.attach import AttachController
    from kvpilot.gui.controllers.server import ServerController
    from kvpilot.gui.dialogs.benchmark_dialog import BenchmarkDialog
    from kvpilot.gui.widgets.window_widgets import WindowWidgets


class BenchmarkController(Controller):
    """Opens the load-test dialog for the server there is."""

    def __init__(
        self, window: WindowWidgets, server: ServerController, attach: AttachController
    ) -> None:
        super().__init__(window)
        self.server = server
        self.attach = attach

    def open(self, *, modal: bool = True) -> BenchmarkDialog | None:
        """The load-test dialog for the watched or running server (None, with a message, when
        there is none)."""
        from functools import partial

        from kvpilot.core.app.loadtest import load_test_config, run_recorded_load_test
        from kvpilot.gui.dialogs.benchmark_dialog import BenchmarkDialog

        attached = self.attach.attached
        if attached is not None:
            base_url, model = attached.base_url, attached.model_id or ""
            api_key = self.attach.api_key
        else:
            serving = self.server.serving()
            if serving is None:
                self.say("start a server first: the benchmark needs it ready", 8000)
                return None
            base_url, model, api_key = serving
        services = self.services
        gpus = self.server.gpus.gpu_indices
        # the same core call as `kvpilot bench`: the window's (first) GPU sampled at 10 Hz for
        # the test, through the window's NVML (a recorded GPU's replay in planner mode), and
        # the test kept with this window's run record
        runner = partial(
            run_recorded_load_test, data_dir=services.data_dir, source="gui",
            gpu_index=gpus[0] if gpus else 0,  # a GPU that cannot be read: no GPU columns
            nvml_module=services.nvml_module(),
        )
        dialog = BenchmarkDialog(
            base_url,
            model,
            self.services.bridge,
            runner,
            load_test_config,
            self.window,
            api_key=api_key or None,
        )
        return self.show_dialog(dialog, modal=modal)
