"""The planner's budget detail marks a plan made for an architecture kvpilot has no rule for."""

from __future__ import annotations

import json
from dataclasses import replace

from fitkit import rtx4090
from testpaths import DATA

from kvpilot.core.app.recommend import RankedPlan
from kvpilot.core.base.model_spec import UNKNOWN_ARCHITECTURE_NOTE
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.models.local import spec_from_config
from kvpilot.gui.panels.planner_panel import PlannerPanel
from kvpilot.gui.records import PlanRow

MODELS = DATA / "models"


def _row(architecture: str) -> PlanRow:
    cfg = json.loads((MODELS / "llama-3.1-8b-instruct" / "config.json").read_text())
    cfg["architectures"] = [architecture]
    spec = replace(spec_from_config(cfg, model_id="x/fancy"), weights_bytes=16_060_522_496,
                   weights_source="file")
    inputs = rtx4090(spec, max_model_len=8192)
    cap = compute_capacity(inputs)
    plan = RankedPlan(model_id="x/fancy", inputs=inputs, capacity=cap, fits=cap.fits,
                      borderline=False, tight=False, reason="")
    return PlanRow(plan, "x/fancy · 8k", "bf16", "x/fancy")


def test_detail_marks_unknown_architecture(qtbot) -> None:
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel._show_detail(_row("FancyNewForCausalLM"))
    assert panel.detail_title.text().endswith(UNKNOWN_ARCHITECTURE_NOTE)
    notes = [panel.detail.item(r, 3).text() for r in range(panel.detail.rowCount())
             if panel.detail.item(r, 3) is not None]
    assert sum(UNKNOWN_ARCHITECTURE_NOTE in n for n in notes) == 3  # activation, graphs, KV
    panel._show_detail(_row("LlamaForCausalLM"))
    assert UNKNOWN_ARCHITECTURE_NOTE not in panel.detail_title.text()


def test_memory_bar_includes_the_vision_encoder_profile() -> None:
    from fitkit import fixture_spec

    from kvpilot.core.fit.budget import ENCODER_PROFILE_TERM
    from kvpilot.gui.panels.planner_panel import plan_segments

    cap = compute_capacity(rtx4090(fixture_spec("qwen2-vl-7b-instruct", 16_582_751_232),
                                   max_model_len=8192, vllm_version="0.32.0"))
    terms = {t.name: t.bytes for t in cap.terms}
    bar = {s.label: s.value for s in plan_segments(cap)}
    assert terms[ENCODER_PROFILE_TERM] > 0
    # weights + overheads + KV fill the request exactly, the encoder's share included
    assert sum(bar.values()) == terms["requested"]


def test_detail_shows_the_quality_figure_and_why_it_beat_the_next(qtbot) -> None:
    from kvpilot.core.base.goal import Goal
    from kvpilot.core.base.plan import GpuTarget
    from kvpilot.core.fit.recommend import recommend
    from kvpilot.core.models.catalog import get
    from kvpilot.core.models.quality import figure_for

    gpu = GpuTarget("NVIDIA GeForce RTX 4090", 24 * 2**30, 22 * 2**30, (8, 9), 1.008e12, 165.2)
    base = recommend(gpu, Goal("chat", 4096, 1), [get("Qwen/Qwen3-8B-AWQ")]).candidates[0]
    first = replace(base, model_id="a", quality=figure_for("nvidia/Qwen3.6-27B-NVFP4", "chat"))
    second = replace(base, model_id="b")  # not looked up: unrated
    rows = [PlanRow(RankedPlan(c.model_id, c.inputs, c.capacity, True, False, False, "",
                               candidate=c), c.model_id, "awq", c.model_id)
            for c in (first, second)]
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    panel.rows = rows
    panel._show_detail(rows[0])
    lines = {panel.detail.item(r, 0).text(): panel.detail.item(r, 3).text()
             for r in range(panel.detail.rowCount()) if panel.detail.item(r, 3) is not None}
    assert lines["quality"].startswith("46.0 on Artificial Analysis Intelligence Index v4.0")
    assert "https://" in lines["quality"]
    assert "b is unrated" in lines["ranked above the next"]


def test_new_plans_select_the_first_that_fits_and_announce_it_once(qtbot) -> None:
    panel = PlannerPanel()
    qtbot.addWidget(panel)
    fits = _row("LlamaForCausalLM")
    announced: list[PlanRow | None] = []
    panel.plan_selected.connect(announced.append)
    panel.set_plans([fits, fits], "Ranked plans")
    assert announced == [fits] and panel.selected() is fits
    panel.set_plans([fits], "Ranked plans")  # the same row index stays selected
    assert announced == [fits, fits] and panel.selected() is fits
    panel.set_plans([], "No plans")
    assert announced == [fits, fits, None] and panel.selected() is None
