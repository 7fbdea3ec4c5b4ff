"""Pidfiles for the servers kvpilot starts, and finding the ones a crashed kvpilot left behind.

Each supervised server has ``<data_dir>/servers/<port>.json`` holding its pid, process group,
address, model, start time, log file, redacted argv, the process create time (to tell a reused
pid from our server) and the pid + create time of the kvpilot process that owns it. At start,
:func:`find_orphans` returns the servers whose owner is gone but whose processes live on; they
can be adopted (attach to the port and tail the log) or stopped. Pidfiles whose processes are all
gone are removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import psutil

from kvpilot.core.base.paths import atomic_write_text
from kvpilot.core.hardware.proctree import StopReport, alive, group_members, stop_tree

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerRecord:
    """What a pidfile holds. Times are Unix seconds (``psutil.Process.create_time``)."""

    pid: int
    pgid: int
    port: int
    host: str
    model: str
    served_model_name: str
    started_at: float
    log_path: str
    argv: tuple[str, ...]
    create_time: float
    owner_pid: int
    owner_create_time: float
    vllm_version: str = ""

    @property
    def base_url(self) -> str:
        """``http://host:port`` (a wildcard bind address is reached on 127.0.0.1)."""
        return server_url(self.host, self.port)


def server_url(host: str, port: int) -> str:
    """``http://host:port`` of a server bound to ``host`` (a wildcard bind address is reached
    on 127.0.0.1; an IPv6 address goes in brackets)."""
    host = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def own_create_time() -> float:
    """This process's start time (psutil's create time; 0.0 when it cannot be read): with its
    pid, what a pidfile's owner fields name."""
    try:
        return psutil.Process(os.getpid()).create_time()
    except psutil.Error:
        return 0.0


@dataclass(frozen=True)
class OrphanServer:
    """A server from a pidfile whose kvpilot is gone.

    ``leader_alive`` is False when only the engine processes survived (the API server was
    killed too); ``pids`` are the live processes of its group.
    """

    record: ServerRecord
    pidfile: Path
    leader_alive: bool
    pids: tuple[int, ...]


def servers_dir(data_dir: Path) -> Path:
    """``<data_dir>/servers``."""
    return Path(data_dir) / "servers"


def pidfile_path(data_dir: Path, port: int) -> Path:
    """The pidfile of the server on ``port``."""
    return servers_dir(data_dir) / f"{port}.json"


def write_pidfile(data_dir: Path, record: ServerRecord) -> Path:
    """Write (atomically) the pidfile for ``record``; returns its path."""
    path = pidfile_path(data_dir, record.port)
    data = asdict(record)
    data["argv"] = list(record.argv)
    atomic_write_text(path, json.dumps(data, indent=1))
    return path


def read_pidfile(path: Path) -> ServerRecord | None:
    """The record in ``path``, or None when the file is unreadable or not a pidfile."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not UTF-8, not JSON
        return None
    if not isinstance(data, dict):
        return None
    values: dict[str, Any] = {}
    for f in fields(ServerRecord):
        if f.name not in data:
            continue
        value = data[f.name]
        kind = _RECORD_TYPES[f.name]
        if f.name == "argv":
            if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
                return None
            value = tuple(value)
        elif kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif not isinstance(value, kind) or isinstance(value, bool):
            return None  # a wrong type (a hand-edited or foreign file) is not our pidfile
        values[f.name] = value
    try:
        record = ServerRecord(**values)
    except TypeError:  # a field missing
        return None
    if record.pid <= 0 or record.pgid <= 0 or not 0 < record.port < 65536:
        return None
    return record


#: the JSON type of each pidfile field
_RECORD_TYPES: dict[str, type] = {
    "pid": int,
    "pgid": int,
    "port": int,
    "host": str,
    "model": str,
    "served_model_name": str,
    "started_at": float,
    "log_path": str,
    "argv": list,
    "create_time": float,
    "owner_pid": int,
    "owner_create_time": float,
    "vllm_version": str,
}


def remove_pidfile(path: Path) -> None:
    """Delete a pidfile (no error when it is already gone or cannot be deleted: a stale
    pidfile that stays is read and skipped again next time)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        log.warning("could not delete the stale pidfile %s: %s", path, exc.strerror or exc)


def _owner_alive(record: ServerRecord) -> bool:
    if record.owner_pid == os.getpid():
        return True
    return bool(alive([record.owner_pid], {record.owner_pid: record.owner_create_time}))


def _live_pids(record: ServerRecord) -> tuple[bool, set[int]]:
    times = {record.pid: record.create_time}
    leader = bool(alive([record.pid], times))
    members: set[int] = set()
    # a group whose number a later leader took is somebody else's: no members
    for pid in group_members(record.pgid, times):
        with contextlib.suppress(psutil.Error):
            # only processes started after our server can belong to it (pgid reuse guard)
            if psutil.Process(pid).create_time() >= record.create_time - 0.05:
                members.add(pid)
    if leader:
        members.add(record.pid)
    return leader, members


def find_orphans(data_dir: Path) -> list[OrphanServer]:
    """Servers from pidfiles whose owning kvpilot is gone but whose processes still run.

    Pidfiles whose processes are all gone (or unreadable pidfiles) are deleted. Servers still
    owned by a live kvpilot (this one or another) are left alone and not returned.
    """
    found: list[OrphanServer] = []
    folder = servers_dir(data_dir)
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        record = read_pidfile(path)
        if record is None:
            remove_pidfile(path)
            continue
        leader, pids = _live_pids(record)
        if not pids:
            remove_pidfile(path)
            continue
        if _owner_alive(record):
            continue
        found.append(OrphanServer(record, path, leader, tuple(sorted(pids))))
    return found


def stop_orphan(
    orphan: OrphanServer,
    *,
    sigint_wait_s: float = 10.0,
    sigterm_wait_s: float = 5.0,
    gpu_pids_check: Callable[[], set[int]] | None = None,
) -> StopReport:
    """Stop an orphaned server's whole group (SIGINT, SIGTERM, SIGKILL) and remove its pidfile."""
    rec = orphan.record
    times = {rec.pid: rec.create_time}
    report = stop_tree(
        rec.pid,
        rec.pgid,
        known_pids=orphan.pids,
        create_times=times,
        sigint_wait_s=sigint_wait_s if orphan.leader_alive else 0.0,
        sigterm_wait_s=sigterm_wait_s,
        gpu_pids_check=gpu_pids_check,
    )
    if report.clean:
        remove_pidfile(orphan.pidfile)
    return report
