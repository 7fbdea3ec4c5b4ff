"""``kvpilot serve``: launch and supervise ``vllm serve`` until SIGINT/SIGTERM.

    kvpilot serve --model DIR|REPO_ID [plan flags] [--port P] [--host H] [--auto-fallback]
                  [--json-events] [-- EXTRA VLLM ARGS...]
    kvpilot serve --profile NAME [--port P] [--vllm V] [--json-events] [--data-dir D]

On a signal the server tree is stopped cleanly and the exit status is 0. A failure to start is
classified (``kvpilot.core.base.failures``); ``--auto-fallback`` relaunches with the best proposed
fallback, then the next ones of that ranking in turn until one starts (never the same launch
twice; at most :data:`kvpilot.core.app.launch.MAX_AUTO_FALLBACKS` in a row). Without
``--gpu-memory-utilization`` on this machine's GPU, the utilization is the one the window plans
with (:mod:`kvpilot.core.app.launch_settings`), said once as a ``utilization`` event.
``--json-events`` prints one JSON object per line for every state
change, phase, capacity reading, failure (with ``kind``) and fallback taken, and a ``vllm_support``
note when the vLLM release is outside the range kvpilot knows. The API key comes
from ``KVPILOT_API_KEY`` (never from the command line, never printed).

``--profile NAME`` serves a profile of the settings dialog as the window does, without one: its
model, serving settings, host and port, extra arguments, vLLM runtime, fallback policy, and its
API key and Hugging Face token from the keyring (or the 0600 settings file), never from argv or
the environment (:mod:`kvpilot.core.app.profile_launch`). This is what ``kvpilot autostart enable
--headless`` runs at login. An unknown profile or a damaged settings file is an error (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from kvpilot.core.app.launch import (
    FallbackPolicy,
    FallbacksOffered,
    FallbackTaken,
    LaunchSession,
)
from kvpilot.core.app.launch_settings import choose_utilization
from kvpilot.core.app.orphan_policy import (
    COMMAND_LINE_WORDS,
    DEFAULT_PORT,
    STOP_FIRST,
    found_sentence,
)
from kvpilot.core.app.profile_launch import fallback_policy
from kvpilot.core.base import failures, paths, versions
from kvpilot.core.base.errors import CommandError, KvpilotError
from kvpilot.core.base.lifecycle import SupervisorState, phase_words
from kvpilot.core.base.plan import PlanInputs, settings_dict
from kvpilot.core.commands import Subparsers
from kvpilot.core.commands.plan import add_plan_arguments
from kvpilot.core.commands.serving_args import (
    device_from_args,
    settings_for_device,
    settings_from_args,
)
from kvpilot.core.hardware.free_now import free_memory_reader
from kvpilot.core.hardware.target import DeviceTarget
from kvpilot.core.hub.identity import model_identity
from kvpilot.core.runtimes.discovery import VllmRuntime, discover
from kvpilot.core.vllm import logparse
from kvpilot.core.vllm.command import LaunchSpec
from kvpilot.core.vllm.orphans import stop_orphan
from kvpilot.core.vllm.supervisor import (
    FAILED,
    READY,
    STOPPED,
    CapacityUpdatedEvent,
    StateEvent,
    Supervisor,
)

if TYPE_CHECKING:
    from kvpilot.core.app.settings import Profile

API_KEY_ENV = "KVPILOT_API_KEY"


def add_parser(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Register ``kvpilot serve``."""
    p = subparsers.add_parser(
        "serve",
        help="launch and supervise a vLLM server",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    add_plan_arguments(p, model_required=False)  # --model, the GPU, the plan flags
    p.add_argument("--profile", metavar="NAME",
                   help="serve this settings profile (model, settings, key) instead of --model")
    p.add_argument("--port", type=int, help=f"port (default: the first free from {DEFAULT_PORT})")
    p.add_argument("--host", default="127.0.0.1", help="bind address (non-local needs an API key)")
    p.add_argument("--served-model-name")
    p.add_argument("--load-format", help="e.g. dummy: random weights, same memory")
    p.add_argument("--vllm", help="vllm executable, Python interpreter or environment")
    p.add_argument("--data-dir", type=Path, help="kvpilot data directory (logs, pidfiles)")
    p.add_argument("--ready-timeout", type=float, default=None, help="seconds (default: none)")
    p.add_argument("--auto-fallback", action="store_true", help="relaunch with the best fallback")
    p.add_argument("--json-events", action="store_true", help="one JSON object per line")
    p.add_argument(
        "--stop-orphans", action="store_true", help="stop servers a crashed kvpilot left"
    )
    p.add_argument("extra", nargs="*", metavar="-- EXTRA", help="extra vllm serve arguments")
    return p


# --------------------------------------------------------------------------------------------
# output


class EventPrinter:
    """Writes events as JSON lines (``--json-events``) or short human lines."""

    def __init__(self, stream: TextIO, *, as_json: bool) -> None:
        self.stream = stream
        self.as_json = as_json
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any], text: str | None) -> None:
        with self._lock:
            if self.as_json:
                self.stream.write(json.dumps(obj, default=str, sort_keys=True) + "\n")
            elif text is not None:
                self.stream.write(text + "\n")
            self.stream.flush()

    def on_event(self, ev: Any) -> None:
        """Supervisor listener."""
        if isinstance(ev, StateEvent):
            obj: dict[str, Any] = {
                "event": "state",
                "state": ev.state,
                "previous": ev.previous,
                "phase": ev.phase,
                "at": ev.at_s,
            }
            if ev.failure is not None:
                obj["kind"] = ev.failure.kind
            self.write(obj, f"kvpilot: {ev.state}")
        elif isinstance(ev, logparse.PhaseEvent):
            self.write(
                {"event": "phase", **_fields(ev)},
                f"kvpilot:   phase {ev.phase} ({phase_words(ev.phase)})",
            )
        elif isinstance(ev, CapacityUpdatedEvent):
            cap = _fields(ev.capacity)
            self.write(
                {"event": "capacity", "source": ev.source, **cap},
                f"kvpilot:   capacity ({ev.source}): KV {ev.capacity.kv_cache_tokens} tokens, "
                f"max concurrency {ev.capacity.max_concurrency}",
            )
        elif isinstance(ev, failures.Failure):
            self.write(
                {"event": "failure", **_fields(ev)},
                f"kvpilot: vLLM failed ({ev.kind}): {ev.message}",
            )

    def info(self, event: str, text: str, **fields: Any) -> None:
        self.write({"event": event, **fields}, f"kvpilot: {text}")


def _fields(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return dict(vars(obj))


# --------------------------------------------------------------------------------------------
# set-up


def build_spec(args: argparse.Namespace, port: int, profile: Profile | None = None) -> LaunchSpec:
    """The LaunchSpec from the command line (API key from ``KVPILOT_API_KEY``), or from
    ``profile`` (its settings, listen address, key, token and extra arguments; extra arguments
    after ``--`` are added to the profile's).

    Raises:
        FitError: a serving flag out of range.
        CommandError: the profile's extra arguments cannot be split.
    """
    model = args.model
    local = Path(model).expanduser()
    if local.exists():
        model = str(local.resolve())
    extra = [a for a in (args.extra or []) if a != "--"]
    if profile is not None:
        from kvpilot.core.app.profile_launch import profile_settings, profile_spec
        from kvpilot.core.vllm.command import parse_extra_args

        spec = profile_spec(profile, model, profile_settings(profile), {
            "port": port,
            **({"served_model_name": args.served_model_name} if args.served_model_name else {}),
            **({"load_format": args.load_format} if args.load_format else {}),
        })
        if extra:
            spec = dataclasses.replace(
                spec, extra_args=(*spec.extra_args, *parse_extra_args(shlex.join(extra)))
            )
        return spec
    return LaunchSpec(
        model=model,
        served_model_name=args.served_model_name,
        host=args.host,
        port=port,
        api_key=os.environ.get(API_KEY_ENV) or None,
        load_format=args.load_format,
        extra_args=tuple(extra),
        **settings_dict(settings_from_args(args)),
    )


def spec_for_device(spec: LaunchSpec, device: DeviceTarget) -> LaunchSpec:
    """``spec`` on ``device``: ``CUDA_VISIBLE_DEVICES`` names this machine's GPUs in use by
    UUID (a reordering between boots must not move the server), and several GPUs mean tensor
    parallelism over all of them unless the flags say otherwise."""
    return dataclasses.replace(
        spec,
        cuda_visible_devices=device.cuda_visible_devices or spec.cuda_visible_devices,
        **settings_dict(settings_for_device(spec.settings, device)),
    )


def ensure_local_model(spec: LaunchSpec, out: EventPrinter) -> LaunchSpec:
    """Download a Hub checkpoint that is not in the cache yet (progress as ``download`` events,
    at most one text line a second); Ctrl-C cancels and keeps the partial file for a resume.

    Raises:
        DownloadError: gated, missing, unreachable, not enough disk (a KvpilotError).
    """
    from kvpilot.core.hub import download

    last_text = [0.0]

    def progress(p: download.DownloadProgress) -> None:
        now = time.monotonic()
        quiet = p.state == "downloading" and now - last_text[0] < 1.0
        if not quiet:
            last_text[0] = now
        eta = f", ETA {p.eta_s:.0f} s" if p.eta_s is not None else ""
        text = (
            f"kvpilot: download {p.state}: {p.bytes_done / 2**30:.2f} of "
            f"{p.bytes_total / 2**30:.2f} GiB, {p.speed_bytes_per_s / 2**20:.1f} MiB/s{eta}"
        )
        out.write({"event": "download", **_fields(p)}, None if quiet else text)

    cancel = threading.Event()
    try:
        return LaunchSession.download(spec, progress, cancel)
    except KeyboardInterrupt:
        cancel.set()
        raise


def plan_inputs(
    args: argparse.Namespace, spec: LaunchSpec, device: DeviceTarget, version: str
) -> PlanInputs | None:
    """PlanInputs for the fit engine's fallbacks, or None when the model cannot be read.

    ``spec.model`` is a local folder by now (a Hub id was downloaded into the Hugging Face
    cache first); the model keeps the identity the user named it by.
    """
    try:
        from kvpilot.core.models.local import load_local_model

        if not Path(spec.model).is_dir():
            return None
        model = load_local_model(spec.model, model_id=model_identity(args.model))
    except (KvpilotError, ImportError):
        return None
    return device.plan_inputs(model, version, spec)  # the release that runs


def args_for_profile(args: argparse.Namespace) -> tuple[argparse.Namespace, Profile]:
    """``args`` with what the profile named by ``--profile`` decides: its model (a catalog id
    becomes its checkpoint's repo, as the planner launches it), listen address and port (a
    ``--port`` given wins), and its vLLM unless ``--vllm`` names one. The serving settings,
    key, token and extra arguments come from the profile in :func:`build_spec`.

    Raises:
        SettingsError: an unknown profile, a damaged settings file, a profile without model.
    """
    from kvpilot.core.app.profile_launch import load_profile
    from kvpilot.core.models import catalog

    profile = load_profile(args.profile).profile
    ref = profile.model_ref.strip()
    found = catalog.find(ref) if not Path(ref).expanduser().exists() else None
    model = found[1].repo if found is not None else ref
    new = argparse.Namespace(**vars(args))
    new.model = model
    new.host = profile.host
    new.port = args.port if args.port is not None else profile.port
    new.vllm = args.vllm or profile.vllm_runtime or None
    return new, profile


class _Signals:
    """SIGINT/SIGTERM -> an event, restored on exit."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._old: dict[int, Any] = {}

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.event.set()

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _settle_orphans(
    session: LaunchSession, args: argparse.Namespace, out: EventPrinter
) -> int:
    """The port to launch on, by the orphan policy (:mod:`kvpilot.core.app.orphan_policy`):
    each orphan is reported, stopped first with ``--stop-orphans``, else launched beside.

    Raises:
        CommandError: the policy refuses (an orphan or another program holds ``--port``).
    """
    decision = session.orphan_decision(args.host, args.port, stop=args.stop_orphans,
                                       words=COMMAND_LINE_WORDS)
    stop = decision.action == STOP_FIRST
    for o in decision.orphans:
        rec = o.record
        out.info(
            "orphan",
            found_sentence(o) + ("; stopping it" if stop else "; pass --stop-orphans to stop it"),
            pid=rec.pid,
            port=rec.port,
            model=rec.model,
            leader_alive=o.leader_alive,
        )
        if stop:
            report = stop_orphan(o)
            out.info(
                "orphan_stopped",
                f"orphan on port {rec.port} stopped"
                + ("" if report.clean else f"; still alive: {report.survivors}"),
                port=rec.port,
                clean=report.clean,
            )
    if stop:  # decided again with them gone
        decision = session.orphan_decision(args.host, args.port, words=COMMAND_LINE_WORDS)
    if decision.refused or decision.port is None:
        raise CommandError(decision.sentence)
    return decision.port


def _wait(
    sup: Supervisor, states: tuple[SupervisorState, ...], stop: threading.Event
) -> SupervisorState | None:
    while not stop.is_set():
        state = sup.wait_for(states, 0.25)
        if state in states or state in (FAILED, STOPPED):
            return state
    return None


# --------------------------------------------------------------------------------------------
# run


def run(args: argparse.Namespace, *, stream: TextIO | None = None) -> int:
    """Serve until a signal (0), or report the failure (1). User errors raise KvpilotError."""
    out = EventPrinter(stream or sys.stdout, as_json=args.json_events)
    profile: Profile | None = None
    if getattr(args, "profile", None):
        if args.model:
            raise CommandError("give --model or --profile, not both (the profile names a model)")
        args, profile = args_for_profile(args)
        out.info("profile", f"serving profile {profile.name!r}: {args.model}",
                 profile=profile.name, model=args.model)
    elif not args.model:
        raise CommandError("give --model DIR|REPO_ID, or --profile NAME to serve a profile")
    data_dir: Path = args.data_dir or paths.data_dir()
    paths.ensure_folder(data_dir, what="data",
                        env_var="--data-dir" if args.data_dir else paths.DATA_DIR_ENV)
    runtime: VllmRuntime = discover(args.vllm, data_dir=data_dir)
    support = versions.support_note(runtime.version)
    if support:
        out.info("vllm_support", support, version=runtime.version)
    device = device_from_args(args, runtime.version)
    session = LaunchSession(
        runtime, data_dir, on_event=out.on_event,
        policy=FallbackPolicy(automatic=True) if args.auto_fallback else fallback_policy(profile),
        free_memory_now=free_memory_reader(device),
        supervisor_options={"ready_timeout_s": args.ready_timeout},
        run_profile=profile.name if profile is not None else None,
    )
    port = _settle_orphans(session, args, out)
    spec = spec_for_device(build_spec(args, port, profile), device)
    # no utilization given (a flag, or a profile left on "auto"): the window's choice
    chosen = choose_utilization(device, spec.settings, runtime.version, spec.extra_args)
    if chosen.automatic:
        spec = dataclasses.replace(spec, gpu_memory_utilization=chosen.utilization)
    if chosen.cap is not None:  # 0.34+ sizes its KV cache from free memory: the cap said
        cap = chosen.cap
        out.info("launch_cap", cap.reason, reason=cap.reason,
                 gpu_memory_utilization=cap.gpu_memory_utilization,
                 headroom_bytes=cap.headroom_bytes, others_bytes=cap.others_bytes)
    elif chosen.automatic:
        out.info("utilization", chosen.sentence, **chosen.to_json())
    spec = ensure_local_model(spec, out)
    inputs = plan_inputs(args, spec, device, runtime.version)

    with _Signals() as signals:
        while True:
            refused = session.startup_check(inputs)
            if refused is not None:
                inputs = refused.inputs
                out.info(
                    "startup_check",
                    f"not launched: {refused.failure.message}",
                    kind=refused.failure.kind,
                    free_bytes=inputs.gpu_free_bytes,
                )
                step = session.after_failure(refused.failure, spec, inputs)
                if isinstance(step, FallbackTaken):
                    spec, inputs = _take(out, step)
                    continue
                _suggest(out, step)
                if args.json_events:  # the text line above already said it
                    print(f"kvpilot: {refused.failure.message}", file=sys.stderr)
                return 1
            sup = session.start(spec, inputs)
            assert sup.command is not None
            out.info(
                "launch",
                f"starting vLLM {runtime.version} on {sup.base_url} (log {sup.log_path})",
                command=sup.command.redacted(),
                base_url=sup.base_url,
                pid=sup.pid,
                log=str(sup.log_path),
                attempt=session.fallbacks_taken + 1,
            )
            state = _wait(sup, (READY,), signals.event)
            if state == READY:
                out.info(
                    "ready",
                    f"serving {sup.model_name} at {sup.base_url}/v1 (Ctrl-C to stop)",
                    base_url=sup.base_url,
                    model=sup.model_name,
                    pid=sup.pid,
                )
                state = _wait(sup, (FAILED, STOPPED), signals.event)
            if state is None:  # a signal: stop cleanly
                report = sup.stop()
                out.info(
                    "stopped",
                    "vLLM stopped" + ("" if report.clean else f"; left: {report.survivors}"),
                    clean=report.clean,
                    signals=list(report.signals),
                )
                return 0
            failure = sup.failure
            sup.wait_stopped(30.0)
            if failure is None:
                return 1
            step = session.after_failure(failure, spec, inputs)
            if isinstance(step, FallbackTaken):
                spec, inputs = _take(out, step)
                continue
            _suggest(out, step)
            if args.json_events:  # the failure's text line already said it
                print(f"kvpilot: vLLM failed ({failure.kind}): {failure.message}",
                      file=sys.stderr)
            return 1


def _take(out: EventPrinter, step: FallbackTaken) -> tuple[LaunchSpec, PlanInputs | None]:
    """Report the session's automatic fallback and return what to launch next (the policy
    keeps the checkpoint, so nothing is downloaded)."""
    choice = step.choice
    out.info(
        "fallback",
        step.sentence,
        attempt=step.attempt,
        kind=step.kind,
        description=choice.description,
        changes=choice.changes,
    )
    return choice.spec, choice.inputs


def _suggest(out: EventPrinter, step: FallbacksOffered) -> None:
    for c in step.choices:
        out.info(
            "suggestion",
            f"try: {c.description} (or rerun with --auto-fallback)",
            description=c.description,
            changes=c.changes,
        )
