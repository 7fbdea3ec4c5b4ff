"""Detect: which of this machine's GPUs can be chosen, and which is chosen first.

:func:`gpu_choices` turns one NVML probe into the choices a selector offers: each GPU that
answers (its index, name, free memory and whether it drives the display), and all of them
together where there are several (one tensor-parallel set), with the choice to make first: the
card :func:`kvpilot.core.hardware.selection.preferred_gpu` names (not the display's, the most
free memory). The window's GPU selector renders them.

:func:`launch_now` says what a launch on one GPU could get right now in the terms of the vLLM
release that would run: the start-up check before 0.34, the utilization cap kvpilot launches
0.34+ with. ``kvpilot gpu`` and the window's GPU panel both show it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvpilot.core.base.versions import default_utilization, supports
from kvpilot.core.fit.budget_now import DEFAULT_MARGIN_BYTES, LaunchBudget, launch_budget
from kvpilot.core.fit.extensible_kv import LaunchCap, launch_cap
from kvpilot.core.hardware.probe import memory_holders, memory_now
from kvpilot.core.hardware.selection import describe_gpu, drives_display, preferred_gpu

if TYPE_CHECKING:
    from kvpilot.core.hardware.probe import GpuSnapshot, ProbeResult


@dataclass(frozen=True)
class GpuChoice:
    """One entry of a GPU selector: its words and the NVML indices it selects."""

    label: str
    indices: tuple[int, ...]


@dataclass(frozen=True)
class GpuChoices:
    """What a probe offers: ``choices`` in the selector's order (empty: no GPU answers) and the
    NVML indices to select first (``preferred``; empty with no choice)."""

    choices: tuple[GpuChoice, ...]
    preferred: tuple[int, ...]


def gpu_choices(result: ProbeResult) -> GpuChoices:
    """The choices of ``result`` (see the module docstring); a failed probe or one whose GPUs
    all fell off the bus offers none."""
    gpus = [g for g in result.gpus if not g.lost] if result.ok else []
    if not gpus:
        return GpuChoices((), ())
    choices = [GpuChoice(describe_gpu(g), (g.index,)) for g in gpus]
    if len(gpus) > 1:
        indices = tuple(g.index for g in gpus)
        names = "+".join(str(i) for i in indices)
        choices.append(GpuChoice(f"{names}: all {len(gpus)} (tensor parallel)", indices))
    chosen = preferred_gpu(gpus) or gpus[0]
    return GpuChoices(tuple(choices), (chosen.index,))


@dataclass(frozen=True)
class LaunchNow:
    """What a launch on one GPU could get right now.

    Attributes:
        budget: the largest utilization that passes the start-up check of releases before
            0.34 (None: the GPU's memory was not read).
        cap: the utilization kvpilot launches 0.34+ with, and why (None: an older release, or
            memory not read).
        text: the one line both faces show: the cap's reason from 0.34, else the budget's.
        tight: True when the line is a warning: before 0.34, the release's default
            utilization (0.9, or 0.92 where vLLM raised it) would not pass the start-up check
            now.
    """

    budget: LaunchBudget | None
    cap: LaunchCap | None
    text: str
    tight: bool


def launch_now(
    gpu: GpuSnapshot, vllm_version: str | None, margin_bytes: int = DEFAULT_MARGIN_BYTES
) -> LaunchNow:
    """What a launch of ``vllm_version`` (None: unknown, read as before 0.34) on ``gpu`` could
    get now; ``margin_bytes`` is kept free for vLLM's CUDA context and safety.

    Raises:
        FitError: ``margin_bytes`` is negative.
    """
    budget = launch_budget(memory_now(gpu), margin_bytes)
    total, free = gpu.cuda_total_bytes, gpu.memory_free_bytes
    if supports("extensible_kv_cache", vllm_version) and total is not None and free is not None:
        cap = launch_cap(vllm_version=vllm_version, total_bytes=total, free_now_bytes=free,
                         drives_display=drives_display(gpu), holders=memory_holders(gpu))
        text = ("vLLM 0.34+ sizes its KV cache from the memory free after warm-up and makes no "
                f"start-up check; {cap.reason}")
        return LaunchNow(budget, cap, text, tight=False)
    if budget is None:
        return LaunchNow(None, None, "", tight=False)
    return LaunchNow(budget, None, budget.message,
                     tight=budget.max_utilization < default_utilization(vllm_version))
