"""The main window on recorded GPUs: GPU panel, planner, launch availability, copy command."""

from __future__ import annotations

import math
import threading
import time

from PySide6.QtCore import QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication
from testpaths import DATA

from kvpilot.gui import app as gui_app


def test_window_opens_on_a_recorded_rtx4090(make_window) -> None:
    w = make_window("rtx4090-desktop")
    title = w.gpu_panel.title.text()
    assert "RTX 4090" in title and "driver 550.54.14" in title and "sm_89" in title
    assert "CUDA 12.4" in title
    labels = [s.label for s in w.gpu_panel.bar.segments()]
    # the desktop processes are named, not lumped together
    assert {"Xorg", "firefox", "gnome-shell"} <= set(labels)
    assert labels[-1] == "free"
    assert "at most gpu_memory_utilization" in w.gpu_panel.warning.text()
    assert w.gpu_control.target is not None and w.gpu_control.target.measured
    # ranked plans: fitting ones first, the first selected, its budget detailed
    rows = w.planner.rows
    assert rows and rows[0].fits
    assert any(not r.fits for r in rows)
    assert w.planner.selected() is rows[0]
    terms = [w.planner.detail.item(r, 0).text() for r in range(w.planner.detail.rowCount())]
    assert "weights" in terms and "kv cache" in terms
    sources = {w.planner.detail.item(r, 2).text() for r in range(len(rows[0].capacity.terms))}
    assert sources <= {"file", "catalog", "model", "default", "user", "measured", "fitted"}
    assert "RTX 4090" in w.planner.heading.text()


def test_the_ranking_runs_beside_the_window_which_keeps_answering(
    make_window, qtbot, monkeypatch
) -> None:
    from kvpilot.gui.services import AppServices

    plan, warm = AppServices.plan, AppServices.warm_planner
    threads: dict[str, threading.Thread] = {}
    planned, released = threading.Event(), threading.Event()

    def slow_plan(self, target, request):
        threads["plan"] = threading.current_thread()
        ranked = plan(self, target, request)
        planned.set()
        # a catalog that takes long to rank: held until the window's loop has turned ten times
        # (were the plan on the window's thread, nothing would turn and this would give up)
        released.wait(20)
        return ranked

    def warm_ahead() -> None:
        threads["warm"] = threading.current_thread()
        warm()

    monkeypatch.setattr(AppServices, "plan", slow_plan)
    monkeypatch.setattr(AppServices, "warm_planner", staticmethod(warm_ahead))
    w = make_window(wait=False)
    ticks: list[float] = []

    def tick() -> None:
        if planned.is_set() and not released.is_set():
            ticks.append(time.monotonic())
            if len(ticks) >= 10:
                released.set()

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(10)
    qtbot.waitUntil(lambda: gui_app.loaded(w), timeout=60_000)
    timer.stop()
    # the catalog was read ahead and the plans made on pool threads; the window's own loop
    # went on turning while a plan was held, released it, and then showed the plans
    assert threads["warm"] is not threading.main_thread()
    assert threads["plan"] is not threading.main_thread()
    assert released.is_set() and len(ticks) == 10
    assert w.planner.rows and w.planner.rows[0].fits
    assert w.planner.rows and w.planner.rows[0].fits


def test_feasibility_chart_marks_the_goal(make_window, qtbot) -> None:
    w = make_window()
    qtbot.waitUntil(lambda: w.planner.curve_bf16.getData()[0] is not None, timeout=10_000)
    x, y = w.planner.curve_bf16.getData()
    assert len(x) == len(y) > 3
    # more context -> fewer users fit (monotone non-increasing where defined)
    finite = [v for v in y if v == v]
    assert finite == sorted(finite, reverse=True)
    gx, gy = w.planner.goal_marker.getData()
    goal = w.planner.request().goal
    assert list(gy) == [goal.users]
    assert math.isclose(10 ** gx[0], goal.context_tokens, rel_tol=1e-9)


def test_goal_change_replans(make_window, qtbot) -> None:
    w = make_window()
    gen = w.plan_control.plan_generation
    w.planner.users.setValue(12)
    qtbot.waitUntil(
        lambda: w.plan_control.plan_generation > gen and "12 users" in w.planner.heading.text(),
        timeout=15_000,
    )
    fitting = [r for r in w.planner.rows if r.fits]
    assert all(r.capacity.max_num_seqs >= 12 for r in fitting)
    # the goal is remembered in the active profile
    saved = w.store.load().settings.active
    assert saved.goal.users == 12 and saved.plan.max_num_seqs is None


def test_no_vllm_disables_launch_with_the_fix(make_window) -> None:
    w = make_window()
    assert w.runtime_control.runtime is None
    assert not w.server_panel.launch_button.isEnabled()
    reason = w.server_panel.reason.text()
    assert "vLLM" in reason and "pip install vllm" in reason
    assert w.server_panel.reason.isVisible()
    # pressing the shortcut does nothing harmful
    w.launch_action.trigger()
    assert w.services.supervisor is None


def test_no_gpu_opens_in_planner_mode(make_window, qtbot) -> None:
    w = make_window("no-driver")
    assert w.gpu_panel.spec_combo.isVisible()
    assert "No GPU" in w.gpu_panel.title.text()
    assert "driver" in w.gpu_panel.title.text().lower()
    assert w.gpu_control.target is not None and not w.gpu_control.target.measured
    assert w.gpu_control.target.name == "NVIDIA GeForce RTX 4090"
    assert "planner mode" in w.planner.heading.text()
    assert w.planner.rows
    # pick another card from the spec table: the plans follow
    names = [w.gpu_panel.spec_combo.itemText(i) for i in range(w.gpu_panel.spec_combo.count())]
    other = next(n for n in names if "3090" in n)
    w.gpu_panel.spec_combo.setCurrentText(other)
    qtbot.waitUntil(lambda: "3090" in w.planner.heading.text(), timeout=15_000)
    assert w.gpu_control.target.name == other


def test_copy_command_has_the_plan_and_no_secret(make_window, store) -> None:
    from dataclasses import replace

    from kvpilot.core.app import settings as st

    w = make_window()
    w.settings = st.update_profile(w.settings, replace(w.profile, api_key="sk-topsecret"))
    text = w.plan_control.copy_command()
    assert text is not None
    assert QGuiApplication.clipboard().text() == text
    row = w.planner.selected()
    assert "vllm serve" in text and row.model_ref in text
    assert f"--max-model-len {row.capacity.max_model_len}" in text
    assert "sk-topsecret" not in text


def test_export_menu_copies_each_format_without_secrets(make_window) -> None:
    from dataclasses import replace

    import yaml

    from kvpilot.core.app import settings as st

    w = make_window()
    w.settings = st.update_profile(w.settings, replace(w.profile, api_key="sk-topsecret"))
    assert w.planner.export_button.isEnabled()
    actions = {a.data(): a for a in w.planner.export_menu.actions()}
    assert set(actions) == {"command", "docker", "compose", "helm"}
    row = w.planner.selected()
    actions["compose"].trigger()
    text = QGuiApplication.clipboard().text()
    assert "sk-topsecret" not in text and "${VLLM_API_KEY:?" in text
    (service,) = yaml.safe_load(text)["services"].values()
    assert service["image"].startswith("vllm/vllm-openai:v")
    assert str(row.capacity.max_model_len) in service["command"]
    assert "# predicted: KV cache" in text
    docker = w.plan_control.export_plan("docker")
    assert docker is not None and docker.startswith("# kvpilot plan")
    # the GPU in use, by UUID (docker parses --gpus as CSV: the inner quotes stay)
    uuid = w.gpu_control.target.uuids[0]
    assert f"""--gpus '"device={uuid}"'""" in docker
    assert "copied" in w.statusBar().currentMessage()


def test_geometry_is_remembered(make_window, store) -> None:
    w = make_window()
    w.resize(783, 611)  # within the 800x800 offscreen screen, above the minimum size
    QApplication.processEvents()
    size = (w.width(), w.height())
    w.close()
    saved = store.load().settings.window_geometry
    assert saved
    w2 = make_window()
    assert (w2.width(), w2.height()) == size


def test_loaded_predicate_needs_all_three(make_window) -> None:
    w = make_window(wait=False)
    assert not gui_app.loaded(w)


def test_a_recorded_failure_log_shows_its_most_specific_failure(make_window, qtbot) -> None:
    """``--panel fallback``: the whole log is classified as during a launch (no guessed API)."""

    from kvpilot.core.base import failures
    from kvpilot.core.vllm import logparse

    log = DATA / "vllm_logs/cpu_0.32/fail_b1_kvbytes_tiny.log"
    scanner = logparse.LogScanner()
    for line in log.read_text(encoding="utf-8").splitlines():
        scanner.feed(line)
    w = make_window("rtx4090-desktop")
    assert gui_app.show_recorded_failure(w, log)
    assert w.fallback_control.last_failure == scanner.failure
    assert w.fallback_control.last_failure.kind == failures.KV_CACHE_TOO_SMALL
    assert w.banner.isVisible() and w.fallback_control.last_failure.message in w.banner.cause.text()
    assert w.log_view.line_count() == len(log.read_text(encoding="utf-8").splitlines())


def test_a_recorded_failure_with_no_fallback_returns_once_the_pool_has_answered(
    make_window, qtbot
) -> None:
    """A port in use has no automatic fallback: the banner says so, and ``show_recorded_failure``
    waits on the controller's ``proposing`` flag, not on buttons that never come (that wait ran
    out its 10 s for each such log: the 1,366 x 768 sweep took 102 s instead of 2)."""
    from kvpilot.core.base import failures

    w = make_window("rtx4090-desktop")
    assert not w.fallback_control.proposing
    log = DATA / "vllm_logs/cpu_0.32/fail_d_port_in_use.log"
    assert gui_app.show_recorded_failure(w, log)
    assert w.fallback_control.last_failure.kind == failures.PORT_IN_USE
    assert not w.fallback_control.proposing
    assert w.banner.option_buttons == []
    assert w.banner.note.text() == "no automatic fallback for this failure; see the log"
    # shown again: "proposing" while the pool works it out, False once it has answered
    w.fallback_control.on_failure(w.fallback_control.last_failure, after_ready=False)
    assert w.fallback_control.proposing
    assert w.banner.note.text() == "working out what would fit…"
    qtbot.waitUntil(lambda: not w.fallback_control.proposing, timeout=10_000)


def test_the_started_window_gives_freed_memory_back_until_it_closes(make_window, qtbot) -> None:
    from kvpilot.core.app import heap

    w = make_window()
    releaser = w.services.heap_releaser
    assert releaser is not None and releaser.period_s == heap.RELEASE_EVERY_S
    assert releaser.running is heap.can_release()
    w.close()
    assert w.services.heap_releaser is None
    assert w.services.join_background()
    assert not releaser.running
    assert not any(t.name == "kvpilot-heap-release" for t in threading.enumerate())


def test_long_documents_pick_a_long_context(make_window, qtbot) -> None:
    w = make_window()
    panel = w.planner
    assert panel.context_tokens()[0] == 8192
    long_docs = next(b for b in panel.use_case_group.buttons()
                     if b.property("use_case") == "long-docs")
    long_docs.click()
    assert panel.context_tokens()[0] == 32768
    qtbot.waitUntil(lambda: "32,768 context" in panel.heading.text(), timeout=15_000)
    chat = next(b for b in panel.use_case_group.buttons() if b.property("use_case") == "chat")
    chat.click()
    assert panel.context_tokens()[0] == 8192


def test_chart_text_and_legends_use_the_plot_text_colour(make_window) -> None:
    """Legends, titles and axes in the theme's text colour on the white plots, not
    pyqtgraph's light grey."""
    from PySide6.QtGui import QColor

    from kvpilot.gui import theme

    w = make_window()
    w.tabs.setCurrentWidget(w.dashboard)  # the dashboard builds its plots when first shown
    want = QColor(theme.PLOT_TEXT)
    legends = [w.planner.chart.getPlotItem().legend]
    legends += [p.legend for p in w.dashboard.plots.values() if p.legend is not None]
    assert len(legends) >= 3
    for legend in legends:
        for _sample, label in legend.items:
            assert QColor(label.opts["color"]) == want, label.text
    axis = w.planner.chart.getPlotItem().getAxis("bottom")
    assert axis.textPen().color() == want
    for plot in w.dashboard.plots.values():  # the opaque grid runs under the legend, not over
        assert plot.getAxis("left").zValue() < plot.vb.zValue()


def test_a_context_above_every_models_maximum_is_said(make_window, qtbot) -> None:
    w = make_window()
    w.planner.context.setEditText("1000k")
    qtbot.waitUntil(lambda: "1,024,000-token context" in w.planner.status.text(),
                    timeout=30_000)
    status = w.planner.status.text()
    assert "short of the 1,024,000-token context asked for" in status
    assert "at its model's maximum (at most " in status
