"""What a probe offers to choose from: each GPU that answers, all of them together where there
are several, and the card chosen first (the recorded NVML of two cards, one driving the
display)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fakes import pynvml_stub

from kvpilot.core.app.detect import GpuChoice, LaunchNow, gpu_choices, launch_now
from kvpilot.core.hardware.probe import probe


def test_two_gpus_offer_each_and_both_and_prefer_the_one_without_the_display(
    fake: Callable[[str], Any],
) -> None:
    offered = gpu_choices(probe(fake("rtx4090-rtx3090")))
    labels = [c.label for c in offered.choices]
    assert labels[0].startswith("0: RTX 4090, ") and labels[0].endswith("(display)")
    assert labels[1].startswith("1: RTX 3090, ")
    assert offered.choices[2] == GpuChoice("0+1: all 2 (tensor parallel)", (0, 1))
    assert [c.indices for c in offered.choices[:2]] == [(0,), (1,)]
    assert offered.preferred == (1,)


def test_one_gpu_offers_itself_alone(fake: Callable[[str], Any]) -> None:
    offered = gpu_choices(probe(fake("rtx4090-desktop")))
    assert [c.indices for c in offered.choices] == [(0,)]
    assert offered.preferred == (0,)


def test_a_lost_gpu_is_not_offered(snapshot: Callable[[str], dict[str, Any]]) -> None:
    result = probe(pynvml_stub.make(snapshot("rtx4090-rtx3090")))
    fallen = replace(result, gpus=(result.gpus[0], replace(result.gpus[1], lost=True)))
    offered = gpu_choices(fallen)
    assert [c.indices for c in offered.choices] == [(0,)]
    assert offered.preferred == (0,)


def test_before_0_34_the_launch_line_is_the_start_up_check(fake: Callable[[str], Any]) -> None:
    gpu = probe(fake("rtx4090-desktop")).gpus[0]
    launch = launch_now(gpu, "0.33.0")
    assert launch.cap is None and launch.budget is not None
    # the desktop holds 1.5 GiB of 23.65: 0.91 passes the check, 0.33's default 0.92 does not
    assert launch.budget.max_utilization == 0.91
    assert launch.text == launch.budget.message
    assert "at most gpu_memory_utilization 0.91 will start" in launch.text
    assert launch.tight
    # before 0.20 the default was 0.9, which passes
    assert not launch_now(gpu, "0.19.1").tight


def test_from_0_34_the_launch_line_is_the_cap_and_the_budget_stays_for_json(
    fake: Callable[[str], Any],
) -> None:
    gpu = probe(fake("rtx4090-desktop")).gpus[0]
    launch = launch_now(gpu, "0.34.0")
    assert launch.cap is not None and launch.cap.gpu_memory_utilization == 0.83
    assert launch.budget is not None and launch.budget.max_utilization == 0.91
    assert launch.text.startswith("vLLM 0.34+ sizes its KV cache from the memory free after "
                                  "warm-up and makes no start-up check; ")
    assert launch.text.endswith(launch.cap.reason) and not launch.tight


def test_a_start_up_check_that_fails_at_the_releases_default_is_a_warning(
    snapshot: Callable[[str], dict[str, Any]],
) -> None:
    data = snapshot("rtx4090-desktop")
    device = data["devices"][0]
    memory = device["memory"]
    held = int(memory["total"] * 0.2)
    memory["used"], memory["free"] = held, memory["total"] - memory["reserved"] - held
    gpu = probe(pynvml_stub.make(data)).gpus[0]
    launch = launch_now(gpu, "0.19.1")
    assert launch.budget is not None and launch.budget.max_utilization < 0.9
    assert launch.tight
    assert not launch_now(gpu, "0.34.0").tight  # 0.34 makes no start-up check


def test_a_gpu_whose_memory_was_not_read_has_no_launch_line(fake: Callable[[str], Any]) -> None:
    gpu = replace(probe(fake("rtx4090-desktop")).gpus[0], memory_free_bytes=None)
    for version in ("0.33.0", "0.34.0", None):
        assert launch_now(gpu, version) == LaunchNow(None, None, "", tight=False)
