"""The servers behind a front: start a profile on demand, stack or swap, sleep, unload when idle.

:class:`Pool` holds one :class:`Slot` per profile. A request :meth:`Pool.acquire`\\ s the slot of
the model it names: a ready slot is handed out at once; otherwise the request waits in a bounded
queue while one task at a time brings the profile up. Bringing up asks the planner
(:func:`~kvpilot.core.front.placement.split`) whether the profile fits next to the ones loaded;
when it does not, the least recently used profiles make room (each waits for its requests in
flight to finish first), by sleeping where vLLM's sleep mode is allowed
(:func:`~kvpilot.core.front.sleep.sleep_support`) and by stopping otherwise. Each launch is a
:class:`LaunchRun` the application layer hands in (run record, measurements, the supervisor's
clean stop); each swap adds its reason, the wait of the first request and the load time to that
run's record (``swaps``). A profile that fails to start leaves its classified failure for the
waiting requests and the pool goes on. Idle profiles are stopped after ``idle_unload_s``.

All methods run on the event loop of the server; the supervisor's blocking calls run in worker
threads. :meth:`Pool.status` may be read from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.front import sleep as sleepmode
from kvpilot.core.front.placement import ProfileNeed, Split, split
from kvpilot.core.runs.store import utc_now

if TYPE_CHECKING:
    from kvpilot.core.base.failures import Failure
    from kvpilot.core.base.plan import PlanInputs
    from kvpilot.core.front.members import Member
    from kvpilot.core.runs.recorder import RunRecorder
    from kvpilot.core.vllm.command import LaunchSpec
    from kvpilot.core.vllm.supervisor import Supervisor

log = logging.getLogger(__name__)

STOPPED = "stopped"
STARTING = "starting"
LOADED = "loaded"
ASLEEP = "asleep"
WAKING = "waking"
UNLOADING = "unloading"
FAILED = "failed"
STATES = (STOPPED, STARTING, LOADED, ASLEEP, WAKING, UNLOADING, FAILED)

#: requests waiting for a profile to come up, all profiles together, before new ones are refused
DEFAULT_MAX_QUEUE = 64
#: seconds a request waits for its profile before it is answered with a timeout
DEFAULT_QUEUE_TIMEOUT_S = 900.0
#: seconds a profile making room waits for its requests in flight before it goes anyway
DRAIN_TIMEOUT_S = 300.0
#: the first loopback port tried for the profiles' servers
PORT_BASE = 18100
#: swaps kept for the status
SWAPS_KEPT = 50


class LaunchRun(Protocol):
    """One launch of a profile, as the application layer's launch session does it: the model
    made local, then a supervised server started and its run recorded."""

    recorder: RunRecorder | None

    def download(self, spec: LaunchSpec) -> LaunchSpec:
        """The spec with a local folder for its model."""
        ...

    def start(self, spec: LaunchSpec, inputs: PlanInputs | None) -> Supervisor:
        """A supervised server for ``spec``, started."""
        ...


class FrontError(KvpilotError):
    """A request the front cannot serve: ``status`` (HTTP), ``code`` and ``kind`` (OpenAI's
    ``error.code`` and ``error.type``) and one sentence."""

    def __init__(self, status: int, kind: str, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.code = code


@dataclass(frozen=True)
class FrontOptions:
    """How the pool behaves. Seconds throughout; None switches a limit off.

    ``idle_unload_s``: stop a profile no request used for this long; ``max_loaded``: at most
    this many profiles loaded at once (the planner may allow fewer); ``allow_sleep``: sleep
    instead of stopping where the runtime and platform allow it; ``ready_timeout_s``: a launch
    not ready by then failed.
    """

    idle_unload_s: float | None = None
    max_loaded: int | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    drain_timeout_s: float = DRAIN_TIMEOUT_S
    allow_sleep: bool = True
    ready_timeout_s: float | None = 1800.0
    idle_check_s: float = 1.0


@dataclass(frozen=True)
class SwapRecord:
    """One bring-up: ``kind`` ``start`` or ``wake``; ``reason`` one sentence (which request,
    stacked or who made room and how); ``wait_s`` from the first waiting request to ready;
    ``load_s`` from the launch (or wake-up call) to ready; ``made_room`` the profiles stopped or
    put to sleep for it; ``ok`` False when it failed (``failure_kind``)."""

    at: str
    profile: str
    kind: str
    reason: str
    wait_s: float
    load_s: float
    made_room: tuple[str, ...] = ()
    ok: bool = True
    failure_kind: str = ""

    def to_json(self) -> dict[str, Any]:
        """The record's fields as JSON values."""
        return {**dataclasses.asdict(self), "made_room": list(self.made_room)}


@dataclass
class Slot:
    """One profile in the pool and its server (mutable; owned by the event loop)."""

    member: Member
    state: str = STOPPED
    supervisor: Supervisor | None = None
    recorder: RunRecorder | None = None
    base_url: str = ""
    share_bytes: int | None = None
    utilization: float | None = None
    inflight: int = 0
    last_used_s: float = 0.0
    bring_up: asyncio.Task[None] | None = None
    failure: Failure | None = None
    failure_message: str = ""
    first_wait_s: float | None = None
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        """The profile's name."""
        return self.member.name

    def alive(self) -> bool:
        """Its server still runs (a loaded or asleep slot whose vLLM died is not)."""
        from kvpilot.core.vllm.supervisor import READY

        return self.supervisor is not None and self.supervisor.state == READY


class Pool:
    """The profiles' servers (see the module docstring).

    Args:
        members: the planned profiles, in the order given.
        data_dir: logs, pidfiles, run records and measurements.
        options: the limits.
        session_factory: makes the :class:`LaunchRun` of one launch (the application layer's
            launch session, recording the run with source ``front``).
    """

    def __init__(
        self,
        members: Sequence[Member],
        data_dir: Path,
        options: FrontOptions | None = None,
        *,
        session_factory: Callable[[Member], LaunchRun],
    ) -> None:
        if not members:
            raise ValueError("a front needs at least one profile")
        self.data_dir = Path(data_dir)
        self.options = options or FrontOptions()
        self.slots: dict[str, Slot] = {m.name: Slot(m) for m in members}
        self._by_model: dict[str, Slot] = {}
        for slot in self.slots.values():
            self._by_model.setdefault(slot.member.served_name, slot)
            self._by_model.setdefault(slot.name, slot)
        self._session_factory = session_factory
        self._lock: asyncio.Lock | None = None
        self._waiting = 0
        self._swaps: deque[SwapRecord] = deque(maxlen=SWAPS_KEPT)
        self._answering = ""
        self._status_lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None
        self._idle_task: asyncio.Task[None] | None = None
        self._closed = False
        self.key = secrets.token_urlsafe(24)  # the servers' key: only the front calls them
        first = members[0]
        self.total_bytes = first.device.total_bytes
        self.cuda = not first.device.is_cpu
        self.sleep = sleepmode.sleep_support(first.runtime.version, cuda_device=self.cuda)
        self.budget_bytes = self._budget(first)

    # ------------------------------------------------------------------ set-up

    @staticmethod
    def _budget(member: Member) -> int:
        from kvpilot.core.fit.recommend import utilization_for

        device = member.device
        util = utilization_for(device.card(), member.runtime.version)
        # None: vLLM 0.34+ on a GPU nothing else uses takes all of it (its default, 1.0)
        return int(device.total_bytes * (util if util is not None else 1.0))

    async def open(self) -> None:
        """Start the idle watch (call on the server's event loop before the first request)."""
        self._lock = asyncio.Lock()
        self._client = httpx.AsyncClient(trust_env=False)
        if self.options.idle_unload_s is not None:
            self._idle_task = asyncio.create_task(self._idle_watch())

    async def close(self) -> None:
        """Stop every server (each confirmed gone) and the idle watch."""
        self._closed = True
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
        tasks = [s.bring_up for s in self.slots.values() if s.bring_up is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        await asyncio.gather(*(self._stop(s) for s in self.slots.values()))
        if self._client is not None:
            await self._client.aclose()

    # ------------------------------------------------------------------ plan

    def plan(self) -> Split:
        """The planner's split of every profile together (``fits`` False: they take turns)."""
        needs = [s.member.need for s in self.slots.values() if s.member.need is not None]
        return split(needs, self.budget_bytes)

    def lookup(self, model: str) -> Slot:
        """The slot a request's ``model`` names (served name or profile name).

        Raises:
            FrontError: no profile serves that model (404, ``model_not_found``).
        """
        slot = self._by_model.get(model)
        if slot is None:
            names = ", ".join(sorted(s.member.served_name for s in self.slots.values()))
            raise FrontError(404, "invalid_request_error", "model_not_found",
                             f"the model {model!r} does not exist here; this front serves: "
                             f"{names}")
        return slot

    # ------------------------------------------------------------------ requests

    async def acquire(self, model: str) -> Slot:
        """The ready slot for ``model``, counted in flight until :meth:`release`.

        Raises:
            FrontError: unknown model (404), queue full (429), waited too long (504), or the
                profile could not start (503, with its classified failure).
        """
        slot = self.lookup(model)
        if self._ready(slot):
            return self._lease(slot)
        if self._waiting >= self.options.max_queue:
            raise FrontError(429, "server_busy", "queue_full",
                             f"{self._waiting} requests already wait for a model to load; "
                             "try again once it is loaded")
        self._waiting += 1
        started = time.monotonic()
        if slot.first_wait_s is None:
            slot.first_wait_s = started
        try:
            await asyncio.wait_for(self._until_ready(slot, model), self.options.queue_timeout_s)
        except (TimeoutError, asyncio.TimeoutError):
            raise FrontError(504, "timeout", "queue_timeout",
                             f"profile {slot.name!r} was not ready after "
                             f"{self.options.queue_timeout_s:.0f} s of waiting") from None
        finally:
            self._waiting -= 1
        return self._lease(slot)

    async def _until_ready(self, slot: Slot, model: str) -> None:
        while not self._ready(slot):
            if self._closed:
                raise FrontError(503, "server_error", "front_stopping", "the front is stopping")
            if slot.bring_up is None or slot.bring_up.done():
                slot.bring_up = asyncio.create_task(self._bring_up(slot, model))
            await asyncio.shield(slot.bring_up)  # a failure raises its FrontError here

    def release(self, slot: Slot) -> None:
        """A request to ``slot`` ended."""
        slot.inflight = max(0, slot.inflight - 1)
        slot.last_used_s = time.monotonic()
        if slot.inflight == 0:
            slot.drained.set()

    def _ready(self, slot: Slot) -> bool:
        if slot.state == LOADED and not slot.alive():
            self._lost(slot)
        return slot.state == LOADED

    def _lease(self, slot: Slot) -> Slot:
        slot.inflight += 1
        slot.drained.clear()
        slot.last_used_s = time.monotonic()
        with self._status_lock:
            self._answering = slot.base_url
        return slot

    def _lost(self, slot: Slot) -> None:
        sup = slot.supervisor
        failure = sup.failure if sup is not None else None
        slot.state = FAILED if failure is not None else STOPPED
        slot.failure = failure

    # ------------------------------------------------------------------ bring up

    async def _bring_up(self, slot: Slot, model: str) -> None:
        assert self._lock is not None
        async with self._lock:
            if self._ready(slot):
                return
            if slot.state == ASLEEP and slot.alive():
                await self._wake(slot, model)
            else:
                await self._start(slot, model)

    def _held_bytes(self, exclude: Slot) -> int:
        held = 0
        for s in self.slots.values():
            if s is exclude or s.member.need is None:
                continue
            if s.state in (LOADED, STARTING, WAKING, UNLOADING):
                held += s.share_bytes if s.share_bytes is not None else s.member.need.want_bytes
            elif s.state == ASLEEP:
                held += s.member.need.asleep_bytes
        return held

    def _fits(self, slot: Slot, need: ProfileNeed | None) -> tuple[bool, Split | None]:
        loaded = [s for s in self.slots.values()
                  if s is not slot and s.state in (LOADED, STARTING, WAKING, UNLOADING)]
        if self.options.max_loaded is not None and len(loaded) + 1 > self.options.max_loaded:
            return False, None
        if loaded and (need is None or any(s.member.need is None for s in loaded)):
            return False, None  # a profile the planner cannot size runs alone
        if need is None:
            return True, None
        if slot.share_bytes is not None and slot.state == ASLEEP:  # wakes with its old share
            need = dataclasses.replace(need, floor_bytes=slot.share_bytes,
                                       want_bytes=slot.share_bytes, fixed=True)
        held = self._held_bytes(slot)  # its own asleep bytes are not counted
        result = split([need], self.budget_bytes, held_bytes=held)
        return result.fits, result

    async def _make_room(self, slot: Slot) -> tuple[Split | None, list[str], str]:
        """Free memory for ``slot``: least recently used first. Returns the split that fits,
        the profiles that made room and how."""
        made: list[str] = []
        how = ""
        while True:
            fits, result = self._fits(slot, slot.member.need)
            if fits:
                return result, made, how
            victims = sorted(
                (s for s in self.slots.values()
                 if s is not slot and s.state in (LOADED, ASLEEP)),
                key=lambda s: (s.state != ASLEEP, s.last_used_s),
            )
            # a sleeping one holds little: put the loaded to sleep or stop them first, and
            # stop a sleeping one only when nothing is loaded any more
            loaded = [s for s in victims if s.state == LOADED]
            victim = loaded[0] if loaded else (victims[0] if victims else None)
            if victim is None:
                return result, made, how
            sleep_it = victim.state == LOADED and self._may_sleep(victim)
            await self._unload(victim, sleep_it=sleep_it)
            made.append(victim.name)
            how = "put to sleep" if sleep_it else "stopped"

    def _may_sleep(self, slot: Slot) -> bool:
        return self.options.allow_sleep and self.sleep.allowed and slot.member.need is not None

    async def _start(self, slot: Slot, model: str) -> None:
        began = time.monotonic()
        wait_from = slot.first_wait_s or began
        result, made, how = await self._make_room(slot)
        member = slot.member
        share = result.share_bytes.get(member.name) if result is not None and result.fits \
            else None
        if result is not None and not result.fits:
            self._fail(slot, "does_not_fit", f"profile {member.name!r} does not fit on this "
                       f"card even alone: {result.reason}")
            self._record(slot, "start", f"request for {model!r}", wait_from, began, made,
                         ok=False)
            raise FrontError(503, "server_error", "does_not_fit", slot.failure_message)
        slot.share_bytes = share
        others = [s.name for s in self.slots.values() if s is not slot and s.state == LOADED]
        if made:
            reason = (f"request for {model!r}; {', '.join(made)} {how} to make room "
                      "(the plan does not fit them together)")
        elif others:
            reason = f"request for {model!r}; stacked beside {', '.join(others)} (the plan fits)"
        else:
            reason = f"request for {model!r}; nothing else loaded"
        slot.state = STARTING
        slot.failure = None
        loaded_at = time.monotonic()
        try:
            sup = await asyncio.to_thread(self._launch, slot, share)
            ready = await asyncio.to_thread(sup.wait_ready, self.options.ready_timeout_s)
        except asyncio.CancelledError:
            await self._stop(slot)
            raise
        except Exception as exc:  # noqa: BLE001 - any launch error goes back to the client
            message = getattr(exc, "message", None) or str(exc)
            self._fail(slot, "launch_error", f"profile {member.name!r} could not be launched: "
                       f"{message}")
            self._record(slot, "start", reason, wait_from, loaded_at, made, ok=False)
            raise FrontError(503, "server_error", "launch_error", slot.failure_message) from None
        if not ready:
            failure = sup.failure
            await asyncio.to_thread(sup.stop)
            kind = failure.kind if failure is not None else "not_ready"
            text = failure.message if failure is not None else (
                f"not ready within {self.options.ready_timeout_s:.0f} s")
            self._fail(slot, kind, f"profile {member.name!r} could not start ({kind}): {text}")
            slot.failure = failure
            self._record(slot, "start", reason, wait_from, loaded_at, made, ok=False)
            raise FrontError(503, "server_error", kind, slot.failure_message)
        slot.state = LOADED
        slot.base_url = sup.base_url
        slot.last_used_s = time.monotonic()
        self._record(slot, "start", reason, wait_from, loaded_at, made)

    def _launch(self, slot: Slot, share: int | None) -> Supervisor:
        """Start the profile's server (blocking: download, flag check, spawn)."""
        member = slot.member
        session = self._session_factory(member)
        settings = member.launch.settings
        if member.inputs is not None:
            settings = member.inputs.settings
        # the share as vLLM's utilization, unless the profile fixes its own (a fixed KV size
        # still needs a utilization the start-up check passes next to the others)
        if share is not None and self.cuda and not member.launch.fixed_utilization:
            settings = dataclasses.replace(
                settings, gpu_memory_utilization=Split(True, 0, 0, {member.name: share})
                .utilization(member.name, self.total_bytes))
        sleeping = self._may_sleep(slot)
        extra_env = dict(sleepmode.SLEEP_ENV) if sleeping else {}
        spec = member.launch.spec(member.model, settings, {
            "host": "127.0.0.1",
            "port": self._port(),
            "api_key": self.key,
            "served_model_name": member.served_name,
            "hf_offline": Path(member.model).expanduser().exists(),
        })
        extra = (*spec.extra_args, sleepmode.SLEEP_FLAG) if sleeping else spec.extra_args
        env = {**spec.extra_env, **extra_env}
        cuda = member.device.cuda_visible_devices
        spec = dataclasses.replace(spec, extra_args=extra, extra_env=env,
                                   cuda_visible_devices=cuda or spec.cuda_visible_devices)
        spec = session.download(spec)
        inputs = member.inputs.with_settings(spec.settings) if member.inputs is not None else None
        sup = session.start(spec, inputs)
        slot.supervisor = sup
        slot.recorder = session.recorder
        if self._closed:  # the front stopped while this launch was under way
            sup.stop()
        return sup

    def _port(self) -> int:
        """A free loopback port none of the pool's servers was given (a server binds its port
        only once it has loaded, so the next launch must not pick it again meanwhile)."""
        from kvpilot.core.vllm.command import find_free_port

        taken = {s.supervisor.port for s in self.slots.values() if s.supervisor is not None}
        port = find_free_port("127.0.0.1", PORT_BASE)
        while port in taken:
            port = find_free_port("127.0.0.1", port + 1)
        return port

    async def _wake(self, slot: Slot, model: str) -> None:
        began = time.monotonic()
        wait_from = slot.first_wait_s or began
        _, made, how = await self._make_room(slot)
        reason = f"request for {model!r}; woken" + (
            f", {', '.join(made)} {how} to make room" if made else "")
        slot.state = WAKING
        loaded_at = time.monotonic()
        try:
            assert self._client is not None
            await sleepmode.wake_up(self._client, slot.base_url, self.key)
        except sleepmode.SleepError as exc:
            await self._stop(slot)
            self._fail(slot, "wake_failed", f"profile {slot.name!r} did not wake: {exc}")
            self._record(slot, "wake", reason, wait_from, loaded_at, made, ok=False)
            raise FrontError(503, "server_error", "wake_failed", slot.failure_message) from None
        slot.state = LOADED
        slot.last_used_s = time.monotonic()
        self._record(slot, "wake", reason, wait_from, loaded_at, made)

    def _fail(self, slot: Slot, kind: str, message: str) -> None:
        from kvpilot.core.base.failures import Failure

        slot.state = FAILED
        slot.failure = Failure(kind, message)
        slot.failure_message = message
        slot.share_bytes = None

    def _record(self, slot: Slot, kind: str, reason: str, wait_from: float, loaded_at: float,
                made: Sequence[str], *, ok: bool = True) -> None:
        now = time.monotonic()
        swap = SwapRecord(
            at=utc_now(), profile=slot.name, kind=kind, reason=reason,
            wait_s=round(now - wait_from, 3), load_s=round(now - loaded_at, 3),
            made_room=tuple(made), ok=ok,
            failure_kind=slot.failure.kind if (not ok and slot.failure is not None) else "",
        )
        slot.first_wait_s = None
        with self._status_lock:
            self._swaps.append(swap)
        if slot.recorder is not None:
            slot.recorder.add_swap(swap.to_json())
        log.info("front: %s %s: %s (wait %.1f s, load %.1f s)", kind, slot.name, reason,
                 swap.wait_s, swap.load_s)

    # ------------------------------------------------------------------ unload

    async def _unload(self, slot: Slot, *, sleep_it: bool) -> None:
        """Wait for ``slot``'s requests in flight (bounded), then sleep or stop it."""
        previous = slot.state
        slot.state = UNLOADING
        if slot.inflight:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(slot.drained.wait(), self.options.drain_timeout_s)
        if sleep_it and previous == LOADED:
            try:
                assert self._client is not None
                await sleepmode.put_to_sleep(self._client, slot.base_url, self.key)
                if await sleepmode.is_sleeping(self._client, slot.base_url, self.key):
                    slot.state = ASLEEP
                    return
                log.warning("front: %s answered /sleep but is not asleep; stopping it", slot.name)
            except sleepmode.SleepError as exc:
                log.warning("front: %s did not go to sleep (%s); stopping it", slot.name, exc)
        await self._stop(slot)

    async def _stop(self, slot: Slot) -> None:
        sup = slot.supervisor
        if sup is not None:
            await asyncio.to_thread(sup.stop)
        slot.supervisor = None
        slot.recorder = None
        slot.base_url = ""
        slot.share_bytes = None
        if slot.state != FAILED:
            slot.state = STOPPED

    async def _idle_watch(self) -> None:
        limit = self.options.idle_unload_s
        assert limit is not None and self._lock is not None
        while True:
            await asyncio.sleep(self.options.idle_check_s)
            now = time.monotonic()
            for slot in self.slots.values():
                idle = slot.state in (LOADED, ASLEEP) and slot.inflight == 0 \
                    and now - slot.last_used_s >= limit
                if not idle:
                    continue
                async with self._lock:
                    if slot.state in (LOADED, ASLEEP) and slot.inflight == 0 \
                            and time.monotonic() - slot.last_used_s >= limit:
                        log.info("front: %s idle for %.0f s; stopping it", slot.name, limit)
                        await self._unload(slot, sleep_it=False)

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        """What the window and ``GET /front/status`` show: each profile's state, the queue, the
        last swaps, the server answering last and the plan's split."""
        plan = self.plan()
        profiles = []
        for slot in list(self.slots.values()):
            need = slot.member.need
            profiles.append({
                "profile": slot.name,
                "model": slot.member.served_name,
                "state": slot.state,
                "base_url": slot.base_url,
                "in_flight": slot.inflight,
                "utilization": (Split(True, 0, 0, {slot.name: slot.share_bytes})
                                .utilization(slot.name, self.total_bytes)
                                if slot.share_bytes and self.cuda else None),
                "share_bytes": slot.share_bytes,
                "floor_bytes": need.floor_bytes if need else None,
                "want_bytes": need.want_bytes if need else None,
                "plan_problem": slot.member.plan_problem,
                "failure_kind": slot.failure.kind if slot.failure is not None else None,
                "failure": slot.failure_message or (slot.failure.message
                                                    if slot.failure is not None else None),
            })
        with self._status_lock:
            swaps = [s.to_json() for s in self._swaps]
            answering = self._answering
        return {
            "profiles": profiles,
            "queue": self._waiting,
            "max_queue": self.options.max_queue,
            "swaps": swaps,
            "answering": answering,
            "sleep": {"allowed": self.sleep.allowed and self.options.allow_sleep,
                      "reason": self.sleep.reason},
            "plan": plan_json(plan, self.total_bytes, self.cuda),
        }


def plan_json(plan: Split, total_bytes: int, cuda: bool) -> dict[str, Any]:
    """The split as JSON: whether every profile fits together, the budget and each share."""
    shares: Mapping[str, int] = plan.share_bytes
    return {
        "stack_all": plan.fits,
        "budget_bytes": plan.budget_bytes,
        "reason": plan.reason,
        "shares": {name: {"bytes": b, "utilization": plan.utilization(name, total_bytes)
                          if cuda else None} for name, b in shares.items()},
    }
