"""The profiles a front serves, each planned as the planner plans it, ready to launch.

:func:`prepare_member` reads one profile (:class:`~kvpilot.core.app.settings.Profile`), finds the
vLLM it names, plans it for this machine's device (:func:`this_device`) and keeps what a launch
needs: the model to start (a catalog id becomes its checkpoint's repo), the plan inputs and the
capacity, and the profile's :class:`~kvpilot.core.front.placement.ProfileNeed`. A profile that
cannot be planned (its model cannot be read) is still served: it has no need, so it runs alone.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.front.placement import ProfileNeed, need_of

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Profile
    from kvpilot.core.base.plan import Capacity, PlanInputs
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.runtimes.discovery import VllmRuntime


@dataclass(frozen=True)
class Member:
    """One profile of a front, planned.

    ``served_name`` is what clients send as ``model`` (the profile's served model name, else its
    model reference); ``model`` what vLLM is started with; ``capacity`` the planned capacity
    (None when the model could not be read: ``plan_problem`` says why); ``need`` its memory
    need for the placement (None without a plan).
    """

    profile: Profile
    served_name: str
    model: str
    runtime: VllmRuntime
    device: DeviceTarget
    inputs: PlanInputs | None
    capacity: Capacity | None
    need: ProfileNeed | None
    plan_problem: str = ""

    @property
    def name(self) -> str:
        """The profile's name."""
        return self.profile.name


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


def launch_model(profile: Profile) -> str:
    """The model a profile launches: a catalog id becomes its checkpoint's repo (as the window's
    planner launches it); a local folder or a repo id stays."""
    from kvpilot.core.models import catalog

    ref = profile.model_ref.strip()
    found = catalog.find(ref) if not Path(ref).expanduser().exists() else None
    return found[1].repo if found is not None else ref


def served_name(profile: Profile) -> str:
    """What clients name the profile's model: its served model name, else its model reference."""
    return (getattr(profile, "served_model_name", "") or "").strip() or profile.model_ref.strip()


def prepare_member(
    profile: Profile, runtime: VllmRuntime, device: DeviceTarget, data_dir: Path
) -> Member:
    """Plan ``profile`` on ``device`` for ``runtime`` (this GPU's measurements in ``data_dir``).

    Raises:
        SettingsError: the profile names no model.
    """
    from kvpilot.core.app.profile_launch import auto_utilization, profile_settings
    from kvpilot.core.base.errors import SettingsError
    from kvpilot.core.fit.calibrate import planned_capacity
    from kvpilot.core.fit.measurements import MeasurementStore
    from kvpilot.core.hub.resolve import load_model_spec

    if not profile.model_ref.strip():
        raise SettingsError(f"profile {profile.name!r} names no model; give it one with "
                            f"kvpilot profile edit {profile.name!r} --model REF")
    settings = profile_settings(profile)
    util = auto_utilization(profile, device)
    if util is not None:
        settings = dataclasses.replace(settings, gpu_memory_utilization=util)
    inputs = capacity = need = None
    problem = ""
    try:
        spec = load_model_spec(profile.model_ref)
        inputs = device.plan_inputs(spec, runtime.version, settings)
        capacity = planned_capacity(inputs, MeasurementStore(data_dir / "measurements.json"))
        need = need_of(profile.name, capacity,
                       fixed_utilization=profile.plan.gpu_memory_utilization is not None,
                       fixed_kv=profile.plan.kv_cache_memory_bytes is not None)
    except KvpilotError as exc:
        problem = exc.message
    return Member(profile, served_name(profile), launch_model(profile), runtime, device,
                  inputs, capacity, need, problem)
