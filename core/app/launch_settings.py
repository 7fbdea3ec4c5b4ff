"""The serving settings a plan or a launch uses where the user left one open.

The GPU memory utilization is the one a user most often leaves open. Planned, exported or
launched, from the command line or the window, it is decided here: a utilization the user gave
is kept; a KV cache size the user gave replaces the utilization budget, so none is chosen;
on a GPU whose free memory was read, the most that passes vLLM's start-up check on the memory
free now, capped (:func:`kvpilot.core.fit.recommend.utilization_for`, the rule the recommender
ranks with); where nothing was read (a GPU named, not detected; the CPU backend) none is chosen
and vLLM's own default applies. The choice comes with one sentence saying that it was chosen and
why, for the face to show once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from kvpilot.core.base import versions
from kvpilot.core.base.plan import ServingSettings, serving_field_names
from kvpilot.core.base.units import gib_text
from kvpilot.core.fit import budget
from kvpilot.core.fit.recommend import MAX_UTILIZATION, utilization_for
from kvpilot.core.hardware.target import DeviceTarget

if TYPE_CHECKING:
    from kvpilot.core.base.plan import PlanInputs
    from kvpilot.core.fit.extensible_kv import LaunchCap

#: ``vllm serve`` arguments that size the KV cache themselves: a launch whose extra arguments
#: hold one gets no utilization chosen for it
SIZING_FLAGS = ("--gpu-memory-utilization", "--kv-cache-memory-bytes",
                "--num-gpu-blocks-override", "--no-enable-extensible-kv-cache",
                "--device-memory-utilization")


@dataclass(frozen=True)
class UtilizationChoice:
    """The GPU memory utilization to plan and launch with.

    Attributes:
        utilization: the fraction of the device's memory (0-1); None for vLLM's own default
            (a KV cache size fixed instead, or no free memory read to choose by).
        automatic: True when kvpilot chose it because the user gave none.
        sentence: one sentence saying it was chosen and why ("" when the user gave it).
        cap: vLLM 0.34+'s launch cap behind the choice (the release sizes its KV cache from
            free memory; :func:`kvpilot.core.fit.extensible_kv.launch_cap`), else None.
    """

    utilization: float | None
    automatic: bool
    sentence: str = ""
    cap: LaunchCap | None = None

    def to_json(self) -> dict[str, object]:
        """``{"gpu_memory_utilization", "automatic", "reason"}`` for ``--json`` outputs."""
        return {"gpu_memory_utilization": self.utilization, "automatic": self.automatic,
                "reason": self.sentence}


def choose_utilization(
    device: DeviceTarget,
    settings: ServingSettings,
    vllm_version: str | None = None,
    extra_args: Sequence[str] = (),
) -> UtilizationChoice:
    """The utilization for ``settings`` on ``device`` (see the module docstring).

    ``vllm_version`` (the release that would run) names vLLM's own default in the sentence when
    that default would not pass the start-up check. ``extra_args`` (extra ``vllm serve``
    arguments) holding one of :data:`SIZING_FLAGS` leave the KV cache to them: none is chosen.
    """
    if settings.gpu_memory_utilization is not None:
        return UtilizationChoice(settings.gpu_memory_utilization, automatic=False)
    if settings.kv_cache_memory_bytes is not None \
            or any(a.split("=")[0] in SIZING_FLAGS for a in extra_args):
        return UtilizationChoice(None, automatic=False)
    card = device.card()
    if versions.supports("extensible_kv_cache", vllm_version) and not device.is_cpu:
        return _extensible_choice(device, vllm_version)
    if card.free_bytes is None or device.is_cpu:
        # nothing read from this machine (a GPU named, the CPU backend): vLLM's own default
        return UtilizationChoice(None, automatic=False)
    util = utilization_for(card)
    lead = f"utilization {util:.2f} chosen automatically (none was given)"
    passing = budget.max_passing_utilization(card.total_bytes, card.free_bytes)
    why = (
        f"the most that passes vLLM's start-up check with {gib_text(card.free_bytes)} of "
        f"{gib_text(card.total_bytes)} free on {device.short_name} now"
    )
    if passing > MAX_UTILIZATION:
        why = (f"{MAX_UTILIZATION:.2f}, the cap kvpilot keeps below the {passing:.2f} that "
               "would pass vLLM's start-up check")
    default = versions.default_utilization(vllm_version) if vllm_version else None
    tail = ""
    if default is not None and default > passing:
        tail = f"; vLLM's own default {default:.2f} would not start"
    return UtilizationChoice(util, True, f"{lead}: {why}{tail}.")


def _extensible_choice(device: DeviceTarget, vllm_version: str | None) -> UtilizationChoice:
    """vLLM 0.34+ sizes its KV cache from the memory free after warm-up: the utilization is
    only a cap, set where the desktop or other processes need room to grow
    (:func:`kvpilot.core.fit.extensible_kv.launch_cap`), else left to vLLM."""
    from kvpilot.core.fit.extensible_kv import launch_cap

    cap = launch_cap(vllm_version=vllm_version, total_bytes=device.total_bytes,
                     free_now_bytes=device.free_bytes, drives_display=device.drives_display,
                     holders=device.memory_holders)
    return UtilizationChoice(cap.gpu_memory_utilization, cap.capped, cap.reason, cap)


def planned_launch_cap(
    inputs: PlanInputs, vllm_version: str | None, utilization: float | None
) -> LaunchCap | None:
    """The launch cap a launch of ``inputs`` runs under on vLLM ``vllm_version``: the one
    :func:`choose_utilization` chooses for 0.34+ on a GPU (the dashboard warns when free memory
    falls under the room it leaves), read from the plan's own reading of the GPU. None for an
    older release, the CPU backend, a KV cache size fixed, or a launch whose ``utilization`` is
    not the cap's (set by hand)."""
    from kvpilot.core.fit.extensible_kv import launch_cap

    if vllm_version is None or not versions.supports("extensible_kv_cache", vllm_version) \
            or inputs.on_cpu_backend or inputs.kv_cache_memory_bytes is not None:
        return None
    cap = launch_cap(vllm_version=vllm_version, total_bytes=inputs.gpu_total_bytes,
                     free_now_bytes=inputs.gpu_free_bytes,
                     drives_display=bool(inputs.gpu_memory_holders),
                     holders=inputs.gpu_memory_holders)
    return cap if cap.gpu_memory_utilization == utilization else None


def with_chosen_utilization(
    settings: ServingSettings, device: DeviceTarget, vllm_version: str | None = None
) -> tuple[ServingSettings, UtilizationChoice]:
    """``settings`` with the utilization :func:`choose_utilization` decides, and the choice."""
    choice = choose_utilization(device, settings, vllm_version)
    if choice.automatic:
        settings = replace(settings, gpu_memory_utilization=choice.utilization)
    return settings, choice


def planned_settings(
    device: DeviceTarget, fixed: ServingSettings, vllm_version: str | None = None
) -> tuple[ServingSettings, UtilizationChoice]:
    """The settings a planner ranks with on ``device``: ``fixed`` (what the user fixed) with
    the utilization :func:`choose_utilization` decides, and the choice. A set of several GPUs
    keeps the recommender's choice per layout (each layout's own cards bound it)."""
    choice = choose_utilization(device, fixed, vllm_version)
    if choice.automatic and device.gpu_set is None and device.count == 1:
        fixed = replace(fixed, gpu_memory_utilization=choice.utilization)
    return fixed, choice


_S = TypeVar("_S", bound=ServingSettings)


def with_settings(settings: _S, overrides: Mapping[str, object]) -> _S:
    """``settings`` (serving settings, or a plan's inputs) with the serving settings in
    ``overrides`` (field -> value) replaced: the settings a backend requires, kept in every
    plan, measurement and launch.

    Raises:
        TypeError: a key that is not a :class:`ServingSettings` field.
    """
    unknown = sorted(set(overrides) - set(serving_field_names()))
    if unknown:
        raise TypeError(f"not serving settings: {', '.join(unknown)}")
    changes: dict[str, Any] = dict(overrides)
    return replace(settings, **changes)
