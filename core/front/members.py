"""The profiles a front serves, each planned as the planner plans it, ready to launch.

A :class:`Member` is one profile as the pool needs it: the model to start (a catalog id becomes
its checkpoint's repo), the plan inputs and the capacity, the profile's
:class:`~kvpilot.core.front.placement.ProfileNeed`, and how the profile launches
(:class:`ProfileLaunch`). The application layer reads the profiles and fills these in
(``kvpilot.core.app.front``); this package never reads a profile itself. A profile that cannot
be planned (its model cannot be read) is still served: it has no need, so it runs alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvpilot.core.base.plan import Capacity, PlanInputs, ServingSettings
    from kvpilot.core.front.placement import ProfileNeed
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.vllm.command import LaunchSpec

#: the launch spec of a profile: (model, planned inputs or serving settings, LaunchSpec field
#: overrides) -> spec
SpecMaker = Callable[[str, "PlanInputs | ServingSettings", Mapping[str, object]], "LaunchSpec"]


@dataclass(frozen=True)
class ProfileLaunch:
    """How one profile launches, as its profile says: ``settings`` its serving settings before
    any plan; ``fixed_utilization`` whether it fixes vLLM's GPU memory utilization itself (the
    pool's share then leaves it alone); ``spec`` makes its launch spec (host, port, key, cache
    and extra arguments of the profile, then the overrides)."""

    settings: ServingSettings
    fixed_utilization: bool
    spec: SpecMaker


@dataclass(frozen=True)
class Member:
    """One profile of a front, planned.

    ``name`` is the profile's name; ``served_name`` what clients send as ``model`` (the
    profile's served model name, else its model reference); ``model`` what vLLM is started
    with; ``launch`` how the profile launches; ``capacity`` the planned capacity (None when the
    model could not be read: ``plan_problem`` says why); ``need`` its memory need for the
    placement (None without a plan).
    """

    name: str
    launch: ProfileLaunch
    served_name: str
    model: str
    runtime: VllmRuntime
    device: DeviceTarget
    inputs: PlanInputs | None
    capacity: Capacity | None
    need: ProfileNeed | None
    plan_problem: str = ""


def this_device(runtime_version: str) -> DeviceTarget:
    """The device a server of ``runtime_version`` runs on here: GPU 0 as NVML reads it now,
    else vLLM's CPU backend (the RAM as its memory) for a CPU build.

    Raises:
        FitError: no NVIDIA GPU and a vLLM that is not its CPU build.
    """
    from kvpilot.core.base.errors import FitError, HardwareError
    from kvpilot.core.base.versions import Release
    from kvpilot.core.hardware import target
    from kvpilot.core.hardware.probe import probe

    if Release.parse(runtime_version).is_cpu_build:
        return target.cpu_target()
    try:
        result = probe()
        if result.ok and result.gpus:
            return target.from_probe(result)
    except (HardwareError, FitError):
        pass
    raise FitError(
        f"no NVIDIA GPU found on this machine and vLLM {runtime_version} is not its CPU build; "
        "a front needs a GPU to run the profiles on"
    )
