"""What a probe offers to choose from: each GPU that answers, all of them together where there
are several, and the card chosen first (the recorded NVML of two cards, one driving the
display)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from fakes import pynvml_stub

from kvpilot.core.app.detect import GpuChoice, gpu_choices
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
