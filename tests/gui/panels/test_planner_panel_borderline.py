"""A borderline plan in the planner table: marked, and launchable."""

from __future__ import annotations

from testpaths import DATA

METRICS = DATA / "metrics"


def test_a_borderline_plan_is_marked_and_launchable(qtbot) -> None:
    from fitkit import fixture_spec, rtx4090

    from kvpilot.core.app.recommend import RankedPlan
    from kvpilot.core.fit.budget import compute_capacity
    from kvpilot.gui.panels.planner_panel import PlannerPanel
    from kvpilot.gui.records import PlanRow

    model = fixture_spec("qwen2.5-7b-instruct", 15_231_233_024)
    # the utilization at which one 32k request lands inside the band (its width is the fitted
    # validation error, so it is looked up)
    inputs = next(i for i in (rtx4090(model, max_model_len=32768, max_num_seqs=1,
                                      gpu_memory_utilization=u / 1000)
                              for u in range(600, 900, 2))
                  if compute_capacity(i).verdict == "borderline")
    cap = compute_capacity(inputs)
    assert cap.verdict == "borderline"
    plan = RankedPlan(model_id="q", inputs=inputs, capacity=cap, fits=False, borderline=True,
                      tight=False, reason="borderline: ...")
    row = PlanRow(plan, title="Qwen/Qwen2.5-7B-Instruct", quantization="", model_ref="q")
    none = RankedPlan(model_id="x", inputs=None, capacity=None, fits=False, borderline=False,
                      tight=False, reason="does not fit")
    refused = PlanRow(none, title="x", quantization="", model_ref="x")
    assert row.borderline and row.launchable and not refused.launchable
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.set_plans([row, refused], "plans")
    assert panel.table.item(0, 0).text() == "≈" and panel.table.item(1, 0).text() == "✗"
    with qtbot.waitSignal(panel.launch_requested, timeout=2_000) as got:
        panel._on_double_click(0, 0)
    assert got.args == [row]
    panel.table.selectRow(0)
    detail = {panel.detail.item(r, 0).text(): panel.detail.item(r, 3).text()
              for r in range(panel.detail.rowCount()) if panel.detail.item(r, 0) is not None}
    low, high = (b / (1 << 30) for b in cap.available_kv_band_bytes)
    assert detail["verdict"].startswith(f"borderline: vLLM's KV memory {low:.2f} to {high:.2f}")
