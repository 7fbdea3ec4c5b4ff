"""Several profiles behind one address: build a front from profile names.

``kvpilot front``, the window's front section and the headless autostart unit all call
:func:`build_front`: it reads the profiles from the settings file (the same records the window
edits), finds each one's vLLM, plans each on this machine's device and hands the pool to a
:class:`~kvpilot.core.front.server.FrontServer`. The rules for the address are those of a single
server: an address other than this machine's loopback needs an API key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kvpilot.core.app.launch import LaunchSession
from kvpilot.core.app.profile_launch import (
    auto_utilization,
    fallback_policy,
    profile_settings,
    profile_spec,
)
from kvpilot.core.base.errors import CommandError, KvpilotError, SettingsError
from kvpilot.core.base.hosts import check_listen_address
from kvpilot.core.front.members import Member, ProfileLaunch, this_device
from kvpilot.core.front.placement import ProfileNeed, need_of
from kvpilot.core.front.pool import FrontOptions, Pool
from kvpilot.core.front.server import FrontServer

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Profile
    from kvpilot.core.base.plan import Capacity, PlanInputs
    from kvpilot.core.hardware.target import DeviceTarget
    from kvpilot.core.runtimes.discovery import VllmRuntime

#: the port a front listens on unless told otherwise (the port clients of vLLM expect)
DEFAULT_PORT = 8000


@dataclass(frozen=True)
class FrontRequest:
    """What to serve and where.

    ``profiles``: profile names (at least one, each once); ``host``/``port``: the front's
    address; ``api_key``: what clients must send (None: none, loopback only); ``vllm``: a vLLM
    for every profile (None: each profile's own, else the one found); ``options``: the pool's
    limits (idle unload seconds, most loaded, queue); ``config_dir``/``data_dir``: kvpilot's
    folders (None: the defaults).
    """

    profiles: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    vllm: str | None = None
    options: FrontOptions = field(default_factory=FrontOptions)
    config_dir: Path | None = None
    data_dir: Path | None = None


def front_request(
    profiles: tuple[str, ...] | list[str],
    *,
    host: str = "",
    port: int = DEFAULT_PORT,
    api_key: str | None = None,
    idle_unload_s: float | None = None,
    max_loaded: int | None = None,
    max_queue: int | None = None,
    queue_timeout_s: float | None = None,
    allow_sleep: bool = True,
    vllm: str | None = None,
    data_dir: Path | None = None,
) -> FrontRequest:
    """The request both faces make from what the user gave: an empty ``host`` is this machine's
    loopback, an empty key none, an idle unload of None switched off, and a queue limit or
    timeout left out (None) the pool's default. The limits are checked by :func:`check_request`."""
    defaults = FrontOptions()
    options = FrontOptions(
        idle_unload_s=None if idle_unload_s is None else float(idle_unload_s),
        max_loaded=max_loaded,
        max_queue=defaults.max_queue if max_queue is None else max_queue,
        queue_timeout_s=defaults.queue_timeout_s if queue_timeout_s is None else queue_timeout_s,
        allow_sleep=allow_sleep,
    )
    return FrontRequest(profiles=tuple(profiles), host=host or "127.0.0.1", port=port,
                        api_key=api_key or None, vllm=vllm, options=options, data_dir=data_dir)


def check_request(req: FrontRequest) -> None:
    """The address and the names, before anything is read.

    Raises:
        CommandError: no profile, a profile named twice, a port out of range, a wide address
            without an API key, a key no HTTP client can send, or a limit out of range.
    """
    if not req.profiles:
        raise CommandError("name at least one profile: --profile NAME (kvpilot profile list "
                           "shows them)")
    twice = sorted({p for p in req.profiles if req.profiles.count(p) > 1})
    if twice:
        raise CommandError(f"profile {twice[0]!r} is named twice; name each profile once")
    check_listen_address(req.host, req.port, req.api_key, serves="the models",
                         key_hint=" (KVPILOT_API_KEY)")
    opts = req.options
    if opts.idle_unload_s is not None and opts.idle_unload_s <= 0:
        raise CommandError("--idle-unload must be a positive number of seconds")
    if opts.max_loaded is not None and opts.max_loaded < 1:
        raise CommandError("--max-loaded must be at least 1")
    if opts.max_queue < 1:
        raise CommandError("--max-queue must be at least 1 (requests wait there while their "
                           "profile loads)")
    if opts.queue_timeout_s <= 0:
        raise CommandError("--queue-timeout must be a positive number of seconds")


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


def profile_member(
    profile: Profile,
    runtime: VllmRuntime,
    device: DeviceTarget,
    *,
    inputs: PlanInputs | None = None,
    capacity: Capacity | None = None,
    need: ProfileNeed | None = None,
    plan_problem: str = "",
) -> Member:
    """``profile`` as a member of a front on ``device``: its names, the model it starts and how
    it launches (its settings, whether it fixes the utilization, its launch spec)."""
    launch = ProfileLaunch(
        settings=profile_settings(profile),
        fixed_utilization=profile.plan.gpu_memory_utilization is not None,
        spec=partial(profile_spec, profile),
    )
    return Member(profile.name, launch, served_name(profile), launch_model(profile), runtime,
                  device, inputs, capacity, need, plan_problem)


def prepare_member(
    profile: Profile, runtime: VllmRuntime, device: DeviceTarget, data_dir: Path
) -> Member:
    """Plan ``profile`` on ``device`` for ``runtime`` (this GPU's measurements in ``data_dir``).

    Raises:
        SettingsError: the profile names no model.
    """
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
    return profile_member(profile, runtime, device, inputs=inputs, capacity=capacity, need=need,
                          plan_problem=problem)


def front_session(
    data_dir: Path, options: FrontOptions
) -> Callable[[Member], LaunchSession]:
    """The launch session of each member's launch: the run recorded (source ``front``, the
    profile's name), never a fallback by itself, ready within ``options.ready_timeout_s``."""

    def session(member: Member) -> LaunchSession:
        return LaunchSession(
            member.runtime, data_dir, policy=fallback_policy(None),
            supervisor_options={"ready_timeout_s": options.ready_timeout_s},
            run_profile=member.name, run_source="front",
        )

    return session


def prepare_members(req: FrontRequest) -> list[Member]:
    """The planned profiles of ``req``.

    Raises:
        SettingsError: an unknown profile, a damaged settings file, a profile without a model,
            or two profiles that clients would name alike.
        RuntimeNotFoundError: no vLLM for a profile.
        FitError: no device to run on.
    """
    from kvpilot.core.app.profile_launch import load_profile
    from kvpilot.core.base import paths
    from kvpilot.core.runtimes.discovery import discover

    data_dir = req.data_dir or paths.data_dir()
    members: list[Member] = []
    for name in req.profiles:
        profile = load_profile(name, req.config_dir).profile
        runtime = discover(req.vllm or profile.vllm_runtime or None, data_dir=data_dir)
        device = this_device(runtime.version)
        members.append(prepare_member(profile, runtime, device, data_dir))
    served: dict[str, str] = {}
    for m in members:
        if m.served_name in served:
            raise SettingsError(
                f"profiles {served[m.served_name]!r} and {m.name!r} both serve {m.served_name!r}; "
                f"give one a served model name: kvpilot profile edit {m.name!r} "
                "--served-model-name NAME"
            )
        served[m.served_name] = m.name
    return members


def build_front(req: FrontRequest) -> FrontServer:
    """A front for ``req``, not started (:meth:`FrontServer.run` or :meth:`FrontServer.start`).

    Raises:
        CommandError: see :func:`check_request`; also the port is in use.
        SettingsError, RuntimeNotFoundError, FitError: see :func:`prepare_members`.
    """
    from kvpilot.core.base import paths
    from kvpilot.core.vllm.command import port_is_free

    check_request(req)
    if not port_is_free(req.host, req.port):
        raise CommandError(f"port {req.port} on {req.host} is already in use; stop what listens "
                           "there or pick another --port")
    members = prepare_members(req)
    data_dir = req.data_dir or paths.data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    pool = Pool(members, data_dir, req.options,
                session_factory=front_session(data_dir, req.options))
    return FrontServer(pool, req.host, req.port, api_key=req.api_key)
