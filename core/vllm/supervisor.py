"""Run one ``vllm serve`` process and know, at every moment, what it is doing.

The :class:`Supervisor` starts vLLM in its own session (process group), reads stdout and stderr in
two threads into a bounded buffer and a rotating log file per launch (``<data_dir>/logs``), feeds
every line to :class:`~kvpilot.core.vllm.logparse.LogScanner`, and polls ``/health`` and
``/v1/models`` in a monitor thread. States::

    starting (phase from the log) -> ready -> stopping -> stopped
                 \\-> failed(kind)      \\-> failed(engine_died)

A failure is declared from the first classified log line (after a short settle time so that a
more specific line of the same burst can win), from ``/health`` answering 503 or refusing
connections after ready (vLLM then exits 0, so the exit code alone is not enough), or from the
exit of the process. After a failure the rest of the process tree is stopped.

Every event is a frozen dataclass, passed to ``on_event`` (from a supervisor thread: adapters
must hand it over to their own thread) and kept in :meth:`Supervisor.events`. No Qt here.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import logging.handlers
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import psutil

from kvpilot.core.base import failures
from kvpilot.core.base.background import notify
from kvpilot.core.base.lifecycle import SupervisorState
from kvpilot.core.fit.measurements import ReportedCapacity
from kvpilot.core.hardware.proctree import StopReport, alive, descendants, stop_tree
from kvpilot.core.vllm import health, logparse, output_lines
from kvpilot.core.vllm.command import SECRET_ENV, LaunchCommand, LaunchSpec, build_command
from kvpilot.core.vllm.launch_log import LaunchLog
from kvpilot.core.vllm.orphans import (
    ServerRecord,
    own_create_time,
    pidfile_path,
    remove_pidfile,
    server_url,
    write_pidfile,
)
from kvpilot.core.vllm.states import (
    FAILED,
    READY,
    STARTING,
    STOPPED,
    STOPPING,
    TERMINAL_STATES,
    CapacityUpdatedEvent,
    LogLineEvent,
    StateEvent,
    SupervisorEvent,
    iter_states,
)

if TYPE_CHECKING:
    import httpx

    from kvpilot.core.runtimes.discovery import VllmRuntime
    from kvpilot.core.vllm.orphans import OrphanServer

#: the events live in :mod:`kvpilot.core.vllm.states` (the states in
#: :mod:`kvpilot.core.base.lifecycle`); listeners may name them here
__all__ = [
    "FAILED", "READY", "STARTING", "STOPPED", "STOPPING", "TERMINAL_STATES",
    "CapacityUpdatedEvent", "LogLineEvent", "StateEvent", "Supervisor", "SupervisorEvent",
    "iter_states",
]

log = logging.getLogger(__name__)



#: events kept by :meth:`Supervisor.events` (output lines are in :meth:`Supervisor.lines`)
MAX_EVENTS = 10_000



class Supervisor:
    """Start, watch and stop one vLLM server.

    Args:
        runtime: the vLLM installation (``VllmRuntime``): executable and version.
        spec: what to launch (``LaunchSpec``); turned into argv + env by ``build_command``.
        data_dir: kvpilot's data directory (``logs/`` and ``servers/`` live there).
        on_event: called with every event, from a supervisor thread.
        health_interval_s: seconds between ``/health`` polls while starting (log lines that
            announce the HTTP server wake the poller at once).
        ready_health_interval_s: seconds between ``/health`` polls once ready (death detection;
            a failure line in the log is acted on at once).
        ready_timeout_s: give up (failed ``startup_timeout``) when not ready by then; None = never.
        gpu_pids_check: returns the pids that currently hold GPU memory (NVML), so that a stop can
            confirm none of ours is left; None on machines without a GPU.
        on_ready_capacity: called once the server is ready with what vLLM reported
            (:class:`ReportedCapacity`) and the start-up time (s, None when unknown), from a
            supervisor thread; :func:`kvpilot.core.fit.measurements.launch_recorder` stores it under
            the plan's key. Whatever it raises is logged and goes no further.
        buffer_lines: lines kept in memory (:meth:`lines`).
        keep_launches: launch log files kept in ``<data_dir>/logs``.
        settle_s: seconds to wait after the first failure line for a more specific one.
        check_flags: refuse flags the runtime's version does not know before launching.
        exit_grace_s: after a classified failure, seconds vLLM gets to exit by itself before
            the rest of its tree is stopped.
        hung_after_s: once ready, a server whose process is alive but whose ``/health`` has
            not answered for this long is declared failed ``server_hung`` (and stopped).
    """

    def __init__(
        self,
        runtime: VllmRuntime | None,
        spec: LaunchSpec | None,
        *,
        data_dir: Path,
        on_event: Callable[[SupervisorEvent], None] | None = None,
        health_interval_s: float = 0.25,
        ready_health_interval_s: float = 0.5,
        ready_timeout_s: float | None = None,
        gpu_pids_check: Callable[[], set[int]] | None = None,
        on_ready_capacity: Callable[[ReportedCapacity, float | None], None] | None = None,
        buffer_lines: int = 5000,
        keep_launches: int = 20,
        log_max_bytes: int = 20 << 20,
        settle_s: float = 0.2,
        check_flags: bool = True,
        exit_grace_s: float = 3.0,
        hung_after_s: float = 30.0,
    ) -> None:
        self.runtime = runtime
        self.spec = spec
        self.data_dir = Path(data_dir)
        self._on_event = on_event
        self.health_interval_s = health_interval_s
        self.ready_health_interval_s = ready_health_interval_s
        self.ready_timeout_s = ready_timeout_s
        self.gpu_pids_check = gpu_pids_check
        self.on_ready_capacity = on_ready_capacity
        self.settle_s = settle_s
        self.check_flags = check_flags
        self.exit_grace_s = exit_grace_s
        self.hung_after_s = hung_after_s
        self._keep_launches = keep_launches
        self._log_max_bytes = log_max_bytes

        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._events: collections.deque[SupervisorEvent] = collections.deque(maxlen=MAX_EVENTS)
        self._lines: collections.deque[str] = collections.deque(maxlen=buffer_lines)
        self._scanner = logparse.LogScanner(
            version=getattr(runtime, "version", None), port=getattr(spec, "port", None)
        )
        self._state: SupervisorState | None = None
        self._phase: str | None = None
        self._failure: failures.Failure | None = None
        self._pending_failures: list[failures.Failure] = []
        self._pending_since: float | None = None
        self._capacity = ReportedCapacity()
        self._returncode: int | None = None
        self._ready_at: float | None = None
        self._started_mono: float | None = None
        self._stop_report: StopReport | None = None
        self._stop_requested = False
        self._cleanup_started = False
        self._post_ready = threading.Event()

        self._proc: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._pgid: int | None = None
        self._create_times: dict[int, float] = {}
        self._known_pids: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._launch_log: LaunchLog | None = None
        self._pidfile: Path | None = None
        self._secret: str | None = None
        self._secrets: tuple[str, ...] = ()
        self._redacted_argv: tuple[str, ...] = ()
        self._host = "127.0.0.1"
        self._port = 0
        self._model_name = ""
        self._api_key: str | None = None
        self._version = getattr(runtime, "version", "") or ""
        self._adopted = False
        self._tail_path: Path | None = None
        self.command: LaunchCommand | None = None

    # ----------------------------------------------------------------- public properties
    @property
    def state(self) -> SupervisorState | None:
        """Current state (None before :meth:`start`)."""
        return self._state

    @property
    def phase(self) -> str | None:
        """Last start-up phase seen in the log."""
        return self._phase

    @property
    def failure(self) -> failures.Failure | None:
        """The classified failure once the state is ``failed``."""
        return self._failure

    @property
    def capacity(self) -> ReportedCapacity:
        """Capacity merged from the log and (>= 0.25, after ready) ``vllm:cache_config_info``."""
        return self._capacity

    @property
    def pid(self) -> int | None:
        """Pid of the ``vllm serve`` (API server) process."""
        return self._pid

    @property
    def pgid(self) -> int | None:
        """Process group of the server tree."""
        return self._pgid

    @property
    def returncode(self) -> int | None:
        """Exit status of the API server once it exited (None while running or when adopted)."""
        return self._returncode

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server."""
        return server_url(self._host, self._port)

    @property
    def port(self) -> int:
        """TCP port of the server."""
        return self._port

    @property
    def model_name(self) -> str:
        """The model id clients send (``--served-model-name`` or the model argument)."""
        return self._model_name

    @property
    def log_path(self) -> Path | None:
        """This launch's log file."""
        return self._launch_log.path if self._launch_log else self._tail_path

    @property
    def stop_report(self) -> StopReport | None:
        """How the process tree was stopped (after stop() or a failure clean-up)."""
        return self._stop_report

    @property
    def started_monotonic_s(self) -> float | None:
        """``time.monotonic()`` when the launch (or the adoption) started."""
        return self._started_mono

    @property
    def ready_monotonic_s(self) -> float | None:
        """``time.monotonic()`` at the ready transition."""
        return self._ready_at

    def events(self) -> list[SupervisorEvent]:
        """A copy of the events emitted so far (the last :data:`MAX_EVENTS`), output lines
        excepted: those are in the bounded :meth:`lines` buffer."""
        with self._lock:
            return list(self._events)

    def lines(self) -> list[str]:
        """The most recent output lines (bounded buffer)."""
        with self._lock:
            return list(self._lines)

    def tree_pids(self) -> set[int]:
        """The API server and every descendant seen so far that is still alive."""
        self._collect_descendants()
        with self._lock:
            pids = {p for p in (self._pid,) if p is not None} | self._known_pids
        return alive(pids, self._create_times)

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Launch vLLM and the reader/monitor threads; returns at once (state ``starting``).

        Raises:
            CommandError: the spec cannot become a valid command (from ``build_command``).
            RuntimeError: start() was already called.
            OSError: the executable could not be started.
        """
        if self._state is not None:
            raise RuntimeError("Supervisor.start() may be called only once")
        if self.runtime is None or self.spec is None:
            raise RuntimeError("this supervisor was adopted; it cannot start a process")
        if self.check_flags:
            cmd = build_command(self.spec, self.runtime)
        else:
            # the flags are left to vLLM itself (its own argparse answers with status 2)
            cmd = build_command(self.spec, None)
            cmd = replace(cmd, argv=(*self.runtime.argv_prefix, *cmd.argv[1:]))
        self.command = cmd
        self._host = cmd.host
        self._port = cmd.port
        self._model_name = cmd.served_model_name
        self._api_key = cmd.api_key
        self._secret = self._api_key
        # every secret handed to the child through its environment (API key, HF token)
        self._secrets = tuple(
            v for k, v in cmd.env.items() if k in SECRET_ENV and v and len(v) >= 4
        )
        self._redacted_argv = tuple(cmd.display_argv)
        stem = f"{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}-{self._port}"
        self._launch_log = LaunchLog(
            self.data_dir / "logs",
            stem,
            max_bytes=self._log_max_bytes,
            backups=2,
            keep_launches=self._keep_launches,
        )
        self._launch_log.write("# " + cmd.redacted())
        env = dict(os.environ)
        env.update(cmd.env)
        self._started_mono = time.monotonic()
        self._set_state(STARTING)
        self._proc = subprocess.Popen(
            list(cmd.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        self._pid = self._proc.pid
        self._pgid = self._proc.pid  # a new session makes the child its own group leader
        with contextlib.suppress(psutil.Error):
            self._create_times[self._pid] = psutil.Process(self._pid).create_time()
        self._write_pidfile()
        assert self._proc.stdout is not None and self._proc.stderr is not None
        self._spawn(self._read_stream, self._proc.stdout, "stdout", name="vllm-stdout")
        self._spawn(self._read_stream, self._proc.stderr, "stderr", name="vllm-stderr")
        self._spawn(self._monitor, name="vllm-monitor")

    @classmethod
    def attach(
        cls,
        orphan: OrphanServer,
        *,
        data_dir: Path,
        on_event: Callable[[SupervisorEvent], None] | None = None,
        health_interval_s: float = 0.25,
    ) -> Supervisor:
        """Adopt a server started by an earlier kvpilot (found by ``orphans.find_orphans``):
        poll its health, tail its log, own its pidfile from now on.

        Returns a started supervisor in state ``ready`` (or ``starting`` while the orphan is
        still loading); ``stop()`` stops it like our own.
        """
        rec = orphan.record
        sup = cls(
            None, None, data_dir=data_dir, on_event=on_event, health_interval_s=health_interval_s
        )
        sup._adopted = True
        sup._host, sup._port = rec.host, rec.port
        sup._model_name = rec.served_model_name or rec.model
        sup._pid, sup._pgid = rec.pid, rec.pgid
        sup._version = rec.vllm_version
        sup._create_times[rec.pid] = rec.create_time
        sup._known_pids = set(orphan.pids) - {rec.pid}
        for pid in sup._known_pids:
            with contextlib.suppress(psutil.Error):
                sup._create_times[pid] = psutil.Process(pid).create_time()
        sup._redacted_argv = rec.argv
        sup._tail_path = Path(rec.log_path) if rec.log_path else None
        sup._started_mono = time.monotonic()
        sup._pidfile = pidfile_path(data_dir, rec.port)
        # the pidfile now belongs to this process
        owner = replace(rec, owner_pid=os.getpid(), owner_create_time=own_create_time())
        write_pidfile(data_dir, owner)
        sup._set_state(STARTING)
        # the server's output went to the kvpilot that started it, which is gone: say so
        earlier = f"earlier lines: {rec.log_path}" if rec.log_path else "no earlier log file"
        sup._handle_line(
            f"kvpilot: adopted the vLLM server on port {rec.port} (pid {rec.pid}) that an "
            "earlier kvpilot started; its output went to that kvpilot, which is gone, so its "
            f"old log stream has ended and no new lines will appear here ({earlier}); health "
            "and metrics are watched as before",
            "kvpilot",
        )
        if sup._tail_path is not None and sup._tail_path.exists():
            sup._spawn(sup._tail_file, sup._tail_path, name="vllm-tail")
        sup._spawn(sup._monitor, name="vllm-monitor")
        return sup

    def wait_for(
        self, states: tuple[SupervisorState, ...], timeout_s: float | None = None
    ) -> SupervisorState | None:
        """Block until the state is one of ``states`` (or terminal); returns the state reached."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while self._state not in states and self._state not in TERMINAL_STATES:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                self._changed.wait(remaining)
            return self._state

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Block until ``ready`` (True) or a terminal state / the timeout (False)."""
        return self.wait_for((READY,), timeout_s) == READY

    def wait_capacity(self, timeout_s: float | None = None) -> ReportedCapacity:
        """After ready: wait until the /metrics capacity read is done; returns the capacity."""
        if self.wait_ready(timeout_s):
            self._post_ready.wait(timeout_s)
        return self._capacity

    @property
    def vllm_version(self) -> str:
        """The version of the supervised vLLM (as its runtime reported it)."""
        return self._version

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        """Block until the tree is cleaned up after stop or failure; True when it was."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while self._stop_report is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def stop(
        self,
        *,
        sigint_wait_s: float = 10.0,
        sigterm_wait_s: float = 5.0,
        sigkill_wait_s: float = 5.0,
    ) -> StopReport:
        """Stop the server tree: SIGINT to the leader, SIGTERM then SIGKILL to the group.

        Then every descendant seen while alive is confirmed gone (stragglers killed by pid) and,
        with ``gpu_pids_check``, that the GPU no longer lists them. Safe to call in any state and
        more than once; returns the report of the (first) stop.
        """
        with self._lock:
            if self._stop_report is not None:
                return self._stop_report
            if self._pid is None:
                report = StopReport((), (), (), 0.0)
                self._stop_report = report
                return report
            self._stop_requested = True
            if self._state not in TERMINAL_STATES:
                self._set_state(STOPPING)
        report = self._cleanup(sigint_wait_s, sigterm_wait_s, sigkill_wait_s)
        with self._lock:
            if self._state not in TERMINAL_STATES:
                self._set_state(STOPPED)
        self._wake.set()
        self._post_ready.set()
        return report

    # ----------------------------------------------------------------- internals
    def _spawn(self, target: Callable[..., None], *args: object, name: str) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _emit(self, event: SupervisorEvent) -> None:
        if not isinstance(event, LogLineEvent):
            with self._lock:
                self._events.append(event)
        if self._on_event is not None:
            notify(log, "on_event listener", self._on_event, event)

    def _set_state(self, state: SupervisorState, failure: failures.Failure | None = None) -> None:
        with self._changed:
            previous = self._state
            if previous == state:
                return
            if state == READY:
                self._ready_at = time.monotonic()
            self._state = state
            if failure is not None:
                self._failure = failure
            event = StateEvent(
                state=state,
                previous=previous,
                at_s=time.time(),
                monotonic_s=time.monotonic(),
                phase=self._phase,
                failure=failure,
                returncode=self._returncode,
            )
            self._changed.notify_all()
        self._emit(event)

    def _write_pidfile(self) -> None:
        assert self._pid is not None and self._pgid is not None
        record = ServerRecord(
            pid=self._pid,
            pgid=self._pgid,
            port=self._port,
            host=self._host,
            model=str(getattr(self.spec, "model", "")),
            served_model_name=self._model_name,
            started_at=time.time(),
            log_path=str(self.log_path or ""),
            argv=self._redacted_argv,
            create_time=self._create_times.get(self._pid, 0.0),
            owner_pid=os.getpid(),
            owner_create_time=own_create_time(),
            vllm_version=self._version,
        )
        self._pidfile = write_pidfile(self.data_dir, record)

    def _redact(self, line: str) -> str:
        for secret in (self._secret, *self._secrets):
            if secret and secret in line:
                line = line.replace(secret, "***")
        return line

    def _read_stream(self, stream: IO[bytes], name: str) -> None:
        output_lines.read_lines(stream, lambda line: self._handle_line(line, name))

    def _tail_file(self, path: Path) -> None:
        output_lines.tail_lines(path, lambda line: self._handle_line(line, "log"),
                                running=lambda: self._state not in TERMINAL_STATES)

    def _handle_line(self, line: str, stream: str) -> None:
        line = self._redact(line)
        now = time.time()
        with self._lock:
            self._lines.append(line)
            if self._launch_log is not None:
                self._launch_log.write(line)
            try:
                parsed = self._scanner.feed(line)
            except Exception:  # the parser must never stop the reader
                log.exception("log parser failed on a line")
                parsed = []
        self._emit(LogLineEvent(stream=stream, line=line, at_s=now))
        for ev in parsed:
            self._on_parsed(ev)

    def _on_parsed(self, ev: logparse.Event) -> None:
        if isinstance(ev, logparse.PhaseEvent):
            with self._lock:
                self._phase = ev.phase
            self._emit(ev)
        elif isinstance(ev, logparse.CapacityEvent):
            self._emit(ev)
            self._merge_log_capacity(ev.figures())
        elif isinstance(ev, failures.Failure):
            with self._lock:
                if self._stop_requested or self._state in TERMINAL_STATES:
                    return  # shutdown noise (e.g. EngineDeadError during a clean stop)
                self._pending_failures.append(ev)
                if self._pending_since is None:
                    self._pending_since = time.monotonic()
            self._wake.set()
        elif isinstance(ev, logparse.ReadyHintEvent):
            self._emit(ev)
            self._wake.set()
        else:
            self._emit(ev)

    def _merge_capacity(self, source: str, values: Mapping[str, Any]) -> None:
        with self._lock:
            new = self._capacity.merged(source, **values)
            if new == self._capacity:
                return
            self._capacity = new
        self._emit(CapacityUpdatedEvent(capacity=new, source=source))

    def _merge_log_capacity(self, figures: Mapping[str, Any]) -> None:
        self._merge_capacity("log", ReportedCapacity.values_from_log(figures))

    def _best_pending(self) -> failures.Failure | None:
        if not self._pending_failures:
            return None
        return self._scanner.failure or self._pending_failures[-1]

    def _fail(self, failure: failures.Failure) -> None:
        with self._lock:
            if self._state in TERMINAL_STATES or self._stop_requested:
                return
        self._emit(failure)
        self._set_state(FAILED, failure)
        self._post_ready.set()
        if not self._adopted or self._pid is not None:
            # vLLM usually exits by itself right after the failure (keeping its own status);
            # give it a moment, then stop what is left of the tree, in this (monitor) thread
            deadline = time.monotonic() + self.exit_grace_s
            while not self._leader_exited() and time.monotonic() < deadline:
                time.sleep(0.05)
            self._cleanup(2.0, 3.0, 5.0)

    def _cleanup(self, sigint_s: float, sigterm_s: float, sigkill_s: float) -> StopReport:
        """Stop the tree once; a second caller waits for the first clean-up and gets its report."""
        with self._changed:
            if self._cleanup_started:
                while self._stop_report is None:
                    self._changed.wait()
                return self._stop_report
            self._cleanup_started = True
            pid, pgid = self._pid, self._pgid
        assert pid is not None and pgid is not None
        try:
            return self._stop_once(pid, pgid, sigint_s, sigterm_s, sigkill_s)
        except BaseException:
            # whoever waits for this clean-up must not wait forever; the tree may be left
            with self._changed:
                if self._stop_report is None:
                    self._stop_report = StopReport((), (pid,), (), 0.0)
                self._changed.notify_all()
            raise

    def _stop_once(
        self, pid: int, pgid: int, sigint_s: float, sigterm_s: float, sigkill_s: float
    ) -> StopReport:
        self._collect_descendants()
        proc = self._proc
        report = stop_tree(
            pid,
            pgid,
            known_pids=self._known_pids,
            create_times=self._create_times,
            leader_exited=(lambda: proc.poll() is not None) if proc is not None else None,
            sigint_wait_s=sigint_s,
            sigterm_wait_s=sigterm_s,
            sigkill_wait_s=sigkill_s,
            gpu_pids_check=self.gpu_pids_check,
        )
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
            self._returncode = proc.returncode
        if self._pidfile is not None and report.clean:
            remove_pidfile(self._pidfile)
        if self._launch_log is not None:
            for t in self._threads:
                if t.name in ("vllm-stdout", "vllm-stderr"):
                    t.join(timeout=2.0)
            with self._lock:
                self._launch_log.close()
        with self._changed:
            if self._stop_report is None:
                self._stop_report = report
            self._changed.notify_all()
        return report

    def _collect_descendants(self) -> None:
        if self._pid is None:
            return
        kids = descendants(self._pid)
        new = kids - self._known_pids
        for pid in new:
            with contextlib.suppress(psutil.Error):
                self._create_times[pid] = psutil.Process(pid).create_time()
        self._known_pids |= kids

    def _leader_exited(self) -> bool:
        if self._proc is not None:
            rc = self._proc.poll()
            if rc is not None:
                self._returncode = rc
                return True
            return False
        return not alive([self._pid] if self._pid else [], self._create_times)

    def _monitor(self) -> None:
        import httpx  # here, on the monitor thread: the desktop app's start does not pay for it

        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        timeout = httpx.Timeout(2.0, connect=0.5)
        last_tree_scan = 0.0
        watch = health.HealthWatch(self.hung_after_s)
        with httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers) as client:
            while True:
                state = self._state
                if state in TERMINAL_STATES or self._stop_requested:
                    return
                now = time.monotonic()
                # 1. a classified log failure, once the burst has settled
                with self._lock:
                    pending = self._pending_since
                if pending is not None and now - pending >= self.settle_s:
                    with self._lock:
                        best = self._best_pending()
                    if best is not None and (state == STARTING or best.kind in _FATAL_AFTER_READY):
                        self._fail(best)
                        return
                    with self._lock:
                        self._pending_failures.clear()
                        self._pending_since = None
                # 2. process exit
                if self._leader_exited():
                    self._on_exit(state)
                    return
                # 3. descendants (for a certain stop later), every couple of seconds
                if now - last_tree_scan > (2.0 if state == STARTING else 15.0):
                    self._collect_descendants()
                    last_tree_scan = now
                # 4. HTTP
                if state == STARTING:
                    if health.serves_model(client, self._model_name):
                        with self._lock:
                            self._scanner.mark_ready()
                        self._set_state(READY)
                        self._collect_descendants()
                        self._after_ready(client)
                    elif (
                        self.ready_timeout_s is not None
                        and self._started_mono is not None
                        and now - self._started_mono > self.ready_timeout_s
                    ):
                        self._fail(
                            _failure(
                                failures.STARTUP_TIMEOUT,
                                f"vLLM was not ready after {self.ready_timeout_s:.0f} s",
                            )
                        )
                        return
                elif state == READY:
                    dead = watch.check(client, self._leader_exited)
                    if dead is not None and not self._stop_requested:
                        if self._leader_exited():  # the exit (status, signal) says more
                            self._on_exit(state)
                        else:
                            self._fail(_failure(*dead))
                        return
                wait = self.health_interval_s if state == STARTING else self.ready_health_interval_s
                with self._lock:
                    if self._pending_since is not None:
                        wait = max(0.0, min(wait, self._pending_since + self.settle_s - now))
                if self._wake.wait(wait):
                    self._wake.clear()

    def _after_ready(self, client: httpx.Client) -> None:
        figures = health.cache_capacity_from_metrics(client, self._version)
        if figures is not None:
            self._merge_capacity("metrics", figures)
        self._post_ready.set()
        if self.on_ready_capacity is not None and not self._capacity.empty:
            startup = (
                None
                if self._ready_at is None or self._started_mono is None
                else self._ready_at - self._started_mono
            )
            notify(log, "on_ready_capacity listener", self.on_ready_capacity, self._capacity,
                   startup)

    def _on_exit(self, state: SupervisorState | None) -> None:
        rc = self._returncode
        # give the readers a moment to deliver the last lines before classifying (a child that
        # outlived the leader keeps the pipes open: never wait for their end of file)
        deadline = time.monotonic() + 0.5
        for t in self._threads:
            if t.name in ("vllm-stdout", "vllm-stderr"):
                t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._stop_requested:
            return
        with self._lock:
            best = self._best_pending()
            was_ready = state == READY
        failure = best
        if failure is None:
            failure = logparse.classify_exit(
                rc if rc is not None else 0, self._scanner, was_ready=was_ready
            )
        if failure is None:
            if was_ready:
                failure = _failure(failures.ENGINE_DIED, f"vLLM exited (status {rc}) while serving")
            else:
                failure = _failure(
                    failures.UNKNOWN, f"vLLM exited with status {rc} before it was ready"
                )
        self._fail(failure)


#: failure kinds that end a server that is already ready
_FATAL_AFTER_READY = (failures.ENGINE_DIED, failures.CUDA_OOM_SERVING)


def _failure(kind: str, message: str) -> failures.Failure:
    return failures.Failure(kind=kind, message=message)
