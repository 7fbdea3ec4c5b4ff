"""Detect: which of this machine's GPUs can be chosen, and which is chosen first.

:func:`gpu_choices` turns one NVML probe into the choices a selector offers: each GPU that
answers (its index, name, free memory and whether it drives the display), and all of them
together where there are several (one tensor-parallel set), with the choice to make first: the
card :func:`kvpilot.core.hardware.selection.preferred_gpu` names (not the display's, the most
free memory). The window's GPU selector renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvpilot.core.hardware.selection import describe_gpu, preferred_gpu

if TYPE_CHECKING:
    from kvpilot.core.hardware.probe import ProbeResult


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
