"""Stopping a ``vllm serve`` process tree for certain.

vLLM's API server spawns ``VLLM::EngineCore`` (which on the CPU backend spawns ``VLLM::Worker``)
and a ``multiprocessing`` resource tracker, all in the server's process group. SIGKILL of the API
server alone leaves the others running and holding memory, and SIGTERM during model loading is
swallowed. :func:`stop_tree` therefore escalates SIGINT (leader) -> SIGTERM (group) -> SIGKILL
(group), then kills by pid any process it saw in the tree that is still alive.
:func:`kill_tree` is the same stop without the polite wait, for helpers that need none (the
runtime installer's pip or uv): the one process-tree kill of the program.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class StopReport:
    """How a stop went.

    ``signals`` lists what was sent, in order (``SIGINT``, ``SIGTERM``, ``SIGKILL``,
    ``SIGKILL:pid`` for stragglers); ``survivors`` are pids still alive at the end (should be
    empty); ``gpu_pids_left`` are pids the GPU hook still reported; ``elapsed_s`` the wall time;
    ``tree`` every pid seen in the tree, the leader included.
    """

    signals: tuple[str, ...]
    survivors: tuple[int, ...]
    gpu_pids_left: tuple[int, ...]
    elapsed_s: float
    tree: tuple[int, ...] = ()

    @property
    def clean(self) -> bool:
        """True when nothing of the tree survived."""
        return not self.survivors and not self.gpu_pids_left


def descendants(pid: int) -> set[int]:
    """Pids of all live descendants of ``pid`` (empty when it is gone)."""
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return set()


def group_members(pgid: int, create_times: dict[int, float] | None = None) -> set[int]:
    """Pids of live processes whose process group is ``pgid`` (zombies excluded); none when
    the group's number now belongs to another leader (:func:`group_reused`, from
    ``create_times``)."""
    found: set[int] = set()
    if group_reused(pgid, create_times):
        return found
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getpgid(proc.pid) == pgid:
                found.add(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def group_reused(pgid: int, create_times: dict[int, float] | None) -> bool:
    """True when process group ``pgid`` now belongs to somebody else: its number is the pid of
    a leader whose create time is known (``create_times``), and a live process with that pid
    started at another time. Once a server's whole group has exited, its number is free; on a
    busy machine (pid numbers wrap at ``/proc/sys/kernel/pid_max``, 32,768 by default) a new
    session leader, such as another program's server, can get it, and signalling the old number
    would stop that program instead."""
    if not create_times or pgid not in create_times:
        return False
    try:
        started = psutil.Process(pgid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return abs(started - create_times[pgid]) > 0.05


def alive(pids: Iterable[int], create_times: dict[int, float] | None = None) -> set[int]:
    """The subset of ``pids`` still running (not zombies; same create time when known)."""
    out: set[int] = set()
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if (
                create_times
                and pid in create_times
                and abs(proc.create_time() - create_times[pid]) > 0.05
            ):
                continue  # the pid was reused by an unrelated process
            out.add(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _killpg(pgid: int, sig: signal.Signals, create_times: dict[int, float]) -> bool:
    """Signal group ``pgid``; False when it is gone or is no longer ours (:func:`group_reused`)."""
    if group_reused(pgid, create_times):
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _wait_gone(check: Callable[[], bool], timeout_s: float, poll_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


def stop_tree(
    leader_pid: int,
    pgid: int,
    *,
    known_pids: Iterable[int] = (),
    create_times: dict[int, float] | None = None,
    leader_exited: Callable[[], bool] | None = None,
    sigint_wait_s: float = 10.0,
    sigterm_wait_s: float = 5.0,
    sigkill_wait_s: float = 5.0,
    gpu_pids_check: Callable[[], set[int]] | None = None,
    gpu_wait_s: float = 5.0,
    orphan_grace_s: float = 2.0,
) -> StopReport:
    """Stop the server whose API process is ``leader_pid`` in process group ``pgid``.

    ``known_pids`` are descendants collected while the tree was alive (a SIGKILLed leader's
    children are reparented and can no longer be found from it). ``leader_exited`` is a callable
    that reaps our own child (``Popen.poll() is not None``); without it liveness is read from
    psutil. ``gpu_pids_check`` returns the pids the GPU still shows (NVML); any of our pids in it
    are killed and waited for up to ``gpu_wait_s``. Once the leader has exited after SIGINT, the
    rest of the group gets ``orphan_grace_s`` to follow it before the group is signalled.
    """
    start = time.monotonic()
    sent: list[str] = []
    tree = {leader_pid, *known_pids, *descendants(leader_pid)}
    times = dict(create_times or {})

    def leader_gone() -> bool:
        if leader_exited is not None:
            return leader_exited()
        return not alive([leader_pid], times)

    def all_gone() -> bool:
        tree.update(descendants(leader_pid))
        return (
            leader_gone()
            and not alive(tree - {leader_pid}, times)
            and not group_members(pgid, times)
        )

    if not all_gone():
        if not leader_gone():
            try:
                os.kill(leader_pid, signal.SIGINT)
                sent.append("SIGINT")
            except (ProcessLookupError, PermissionError):
                pass
        else:
            sigint_wait_s = 0.0  # nobody left to ask politely
        leader_gone_at: list[float] = []

        def done_or_leader_long_gone() -> bool:
            # once the leader has exited, its children get a short grace, not the full wait
            if all_gone():
                return True
            if leader_gone():
                if not leader_gone_at:
                    leader_gone_at.append(time.monotonic())
                return time.monotonic() - leader_gone_at[0] > orphan_grace_s
            return False

        _wait_gone(done_or_leader_long_gone, sigint_wait_s)
        if not all_gone():
            if _killpg(pgid, signal.SIGTERM, times):
                sent.append("SIGTERM")
            if not _wait_gone(all_gone, sigterm_wait_s) and _killpg(pgid, signal.SIGKILL, times):
                sent.append("SIGKILL")
                _wait_gone(all_gone, sigkill_wait_s)
    # stragglers that left the group (or were never in it) but belong to the tree
    for pid in sorted(alive(tree - {leader_pid}, times) | group_members(pgid, times)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            sent.append(f"SIGKILL:{pid}")
    _wait_gone(lambda: not alive(tree - {leader_pid}, times), sigkill_wait_s)
    survivors = alive(tree - {leader_pid}, times)
    if not leader_gone():
        survivors.add(leader_pid)
    gpu_left: set[int] = set()
    if gpu_pids_check is not None:
        ours = tree | {leader_pid}

        def gpu_clear() -> bool:
            gpu_left.clear()
            gpu_left.update(set(gpu_pids_check()) & ours)
            return not gpu_left

        if not gpu_clear():
            for pid in gpu_left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            _wait_gone(gpu_clear, gpu_wait_s, poll_s=0.25)
    return StopReport(
        signals=tuple(sent),
        survivors=tuple(sorted(survivors)),
        gpu_pids_left=tuple(sorted(gpu_left)),
        elapsed_s=time.monotonic() - start,
        tree=tuple(sorted(tree | {leader_pid})),
    )


def kill_tree(pid: int, *, timeout_s: float = 5.0) -> list[int]:
    """Stop ``pid`` (started with ``start_new_session=True``) and all it started at once: SIGINT,
    then without waiting SIGTERM to its group, SIGKILL after ``timeout_s``; returns the pids of
    the tree (empty when ``pid`` is already gone).

    A ``pid`` that leads no process group is safe too: no group has its number, so only the
    processes found below it are signalled.
    """
    if not alive([pid]):
        return []
    report = stop_tree(
        pid, pid, sigint_wait_s=0.0, sigterm_wait_s=timeout_s, sigkill_wait_s=timeout_s,
        orphan_grace_s=0.0,
    )
    return list(report.tree)
