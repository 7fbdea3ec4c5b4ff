"""The window's fallbacks after vLLM's own free-memory refusal on the desktop snapshot: the plan
was made at utilization 0.91 (what passed with the memory free then); vLLM read less free memory
at start-up and refused. The banner offers the lower utilization vLLM names, sized on vLLM's
reading, instead of "no automatic fallback"."""

from __future__ import annotations

from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.app.launch import FallbacksOffered
from kvpilot.core.app.settings import Profile
from kvpilot.core.base import failures
from kvpilot.core.base.goal import Goal
from kvpilot.core.base.units import GiB
from kvpilot.core.vllm.logparse import LogScanner
from kvpilot.gui.bridge import CoreBridge
from kvpilot.gui.records import PlanRequest
from kvpilot.gui.services import AppServices, LaunchRequest

MODEL = DATA / "models" / "qwen2.5-7b-instruct"
#: vLLM 0.3x's refusal (the wording in core/vllm/logfailures.py, GPU33_FORMAT), on a card whose
#: desktop grew between kvpilot's reading and vLLM's
REFUSAL = ("(EngineCore pid=4188) ERROR 11-29 10:12:03 [core.py:1584] ValueError: Free memory on "
           "device cuda:0 (20.91/23.53 GiB) on startup is less than desired GPU memory "
           "utilization (0.91, 21.41 GiB). Decrease GPU memory utilization or reduce GPU memory "
           "used by other processes.")


def test_vllms_free_memory_refusal_gets_the_utilization_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    services = AppServices(CoreBridge(), fake_gpu="rtx4090-desktop", data_dir=tmp_path)
    try:
        target = services.target_from_selection(services.probe(), (0,))
        request = PlanRequest(Goal(context_tokens=8192, users=4, vllm_version="0.11.0"),
                              model_ref=str(MODEL))
        row = next(r for r in services.plan(target, request).rows if r.fits)
        assert row.inputs is not None and row.inputs.gpu_memory_utilization == 0.91
        scanner = LogScanner(version="0.11.0")
        scanner.feed(REFUSAL)
        failure = scanner.failure
        assert failure is not None
        assert failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
        launch = LaunchRequest(inputs=row.inputs, model=str(MODEL), profile=Profile(name="p"))
        step = services.after_failure(failure, launch)  # nothing sampled: the plan's reading
        assert isinstance(step, FallbacksOffered)  # the profile takes none by itself
        options = step.choices
    finally:
        services.shutdown()
    assert options, "no fallback offered for vLLM's free-memory refusal"
    first = options[0]
    util = first.changes.get("gpu_memory_utilization")
    assert isinstance(util, float) and util < 0.91
    assert util * 23.53 * GiB <= 20.91 * GiB  # what vLLM read free passes its own check
    assert f"utilization {util:.2f}" in first.label
