"""``kvpilot recommend`` and the window's planner rank alike: on the recorded ``rtx4090-desktop``
and ``rtx5090`` GPUs, for chat, long documents, batch and coding, the same checkpoints in the
same order (fits, borderline, the rest) with the same reasons, the same tight marks and the same
capacities, and a local model folder ranks that model on both faces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.base.goal import DEFAULT_CONTEXT_TOKENS, USE_CASE_CONTEXT_TOKENS, Goal
from kvpilot.core.cli import main
from kvpilot.gui.records import PlanRequest, PlanRow
from kvpilot.gui.services import AppServices

VLLM_VERSION = "0.11.0"
MODEL = DATA / "models" / "qwen2.5-7b-instruct"
USERS = 4


@pytest.fixture(params=["rtx4090-desktop", "rtx5090"])
def snapshot(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    monkeypatch.setenv("KVPILOT_FAKE_NVML", name)
    return name


@pytest.fixture
def window(snapshot: str, tmp_path: Path, make_services) -> AppServices:
    return make_services(snapshot, tmp_path / "data")


def _window_rows(services: AppServices, use_case: str, model_ref: str = "") -> list[PlanRow]:
    target = services.target_from_selection(services.probe(), (0,))
    goal = Goal(use_case=use_case, context_tokens=_context(use_case), users=USERS,
                vllm_version=VLLM_VERSION)
    return services.plan(target, PlanRequest(goal, model_ref=model_ref)).rows


def _cli_json(capsys: pytest.CaptureFixture, use_case: str, *extra: str) -> dict:
    capsys.readouterr()
    main(["recommend", "--json", "--use-case", use_case, "--context", str(_context(use_case)),
          "--users", str(USERS), "--vllm-version", VLLM_VERSION, "--limit", "1000", *extra])
    out: dict = json.loads(capsys.readouterr().out)
    return out


def _context(use_case: str) -> int:
    return USE_CASE_CONTEXT_TOKENS.get(use_case, DEFAULT_CONTEXT_TOKENS)


@pytest.mark.parametrize("use_case", ["chat", "long-docs", "batch", "coding"])
def test_the_cli_and_the_window_rank_alike(
    window: AppServices, capsys: pytest.CaptureFixture, use_case: str
) -> None:
    cli = _cli_json(capsys, use_case)
    rows = _window_rows(window, use_case)
    # the command line lists the plans that fit, then every rejection; the window one list
    cli_order = [(c["model"], c["reason"]) for c in cli["candidates"]]
    cli_order += [(r["model"], r["reason"]) for r in cli["rejected"]]
    assert [(r.plan.model_id, r.reason) for r in rows] == cli_order
    assert any(r.fits for r in rows) and any(not r.fits for r in rows)
    fitting = [r for r in rows if r.plan.candidate is not None]
    assert [(r.tight, r.capacity.kv_cache_tokens if r.capacity else None,
             r.capacity.gpu_memory_utilization if r.capacity else None) for r in fitting] == [
        (c["tight"], c["kv_cache_tokens"], c["gpu_memory_utilization"])
        for c in cli["candidates"]]
    # borderline rejections come first on both faces
    assert [r["borderline"] for r in cli["rejected"]] == [
        r.plan.borderline for r in rows if r.plan.rejection is not None]
    assert [r["borderline"] for r in cli["rejected"]] == sorted(
        (r["borderline"] for r in cli["rejected"]), reverse=True)


def test_a_model_folder_is_ranked_alike(window: AppServices, capsys: pytest.CaptureFixture) -> None:
    cli = _cli_json(capsys, "chat", "--model", str(MODEL))
    rows = _window_rows(window, "chat", str(MODEL))
    assert [r.plan.model_id for r in rows] == [c["model"] for c in cli["candidates"]] == [
        str(MODEL)]
    assert rows[0].model_ref == str(MODEL)
    assert rows[0].reason == cli["candidates"][0]["reason"]
    assert rows[0].capacity is not None
    assert rows[0].capacity.kv_cache_tokens == cli["candidates"][0]["kv_cache_tokens"]
