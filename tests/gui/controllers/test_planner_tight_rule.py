"""One "tight" rule: the planner table's amber marks are the plans `kvpilot recommend` flags."""

from __future__ import annotations

import json

from kvpilot.core.base.goal import Goal
from kvpilot.core.cli import main
from kvpilot.gui import theme
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest
from kvpilot.gui.services import AppServices

GPU = "NVIDIA GeForce RTX 4090"


def test_gui_and_cli_flag_the_same_plans_tight(qtbot, capsys, monkeypatch) -> None:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "no-driver")
    assert main(["recommend", "--gpu", GPU, "--context", "32768", "--users", "6",
                 "--vllm-version", "0.32.0", "--limit", "100", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)["candidates"]
    cli_tight = [(c["model"], c["kv_cache_dtype"], c["tight"]) for c in cli]

    services = AppServices(CoreBridge())
    result = services.plan(
        services.target_from_spec(GPU),
        PlanRequest(Goal(context_tokens=32768, users=6, vllm_version="0.32.0")),
    )
    rows = [r for r in result.rows if r.source is not None and hasattr(r.source, "tight")]
    gui_tight = [(r.source.model_id, r.capacity.kv_cache_dtype, r.tight) for r in rows]
    # the "KV spare" figure of each row is the CLI's kv_headroom_bytes, the one the rule judges
    assert [r.kv_headroom_bytes for r in rows] == [c["kv_headroom_bytes"] for c in cli]

    assert gui_tight == cli_tight
    tight = [m for m, _, t in cli_tight if t]
    assert 2 <= len(tight) < len(cli_tight)  # both kinds occur: the comparison means something
    for r in rows:
        if r.fits:
            assert r.status_color == (theme.TIGHT if r.tight else theme.OK)
