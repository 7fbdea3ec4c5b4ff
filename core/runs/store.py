"""Run records on disk: ``<data dir>/runs/<id>.json``, written atomically, pruned, read safely.

* every write is atomic (:func:`kvpilot.core.base.paths.atomic_write_text`, mode 0600): a reader
  sees the old record or the new one, never a part;
* :meth:`RunStore.prune` (run after each new record) removes finished records older than
  :data:`MAX_AGE_DAYS` and then the oldest finished ones until the folder is under
  :data:`MAX_TOTAL_BYTES`; a running record is never removed;
* :meth:`RunStore.records` skips a damaged record (not JSON, wrong shape) with a warning
  naming the file, never an exception;
* a record left ``running`` whose kvpilot process is gone reads as ``lost``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from kvpilot.core.base.errors import KvpilotError
from kvpilot.core.base.paths import atomic_write_text
from kvpilot.core.runs.record import (
    LOST,
    RUNNING,
    LoadTestSummary,
    RunRecord,
    RunRecordError,
    record_from_json,
)

log = logging.getLogger("kvpilot.runs")

FOLDER = "runs"
#: finished records older than this are pruned (days)
MAX_AGE_DAYS = 90.0
#: the folder is kept under this many bytes (oldest finished records go first)
MAX_TOTAL_BYTES = 16 << 20
#: a record file larger than this is not read (damaged or not ours)
MAX_RECORD_BYTES = 4 << 20
_ID = re.compile(r"^[0-9]{8}-[0-9]{6}-[0-9a-f]{4}$")


def new_run_id(now_s: float | None = None) -> str:
    """``YYYYmmdd-HHMMSS-xxxx`` (UTC), sortable by start time."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now_s is None else now_s))
    return f"{stamp}-{secrets.token_hex(2)}"


def utc_now() -> str:
    """Now as ISO-8601 UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class RunList:
    """The records that could be read (newest first) and one warning per skipped file."""

    records: tuple[RunRecord, ...]
    warnings: tuple[str, ...] = ()


class RunStore:
    """The run records of one data directory (thread-safe within the process)."""

    def __init__(self, data_dir: Path, *, max_age_days: float = MAX_AGE_DAYS,
                 max_total_bytes: int = MAX_TOTAL_BYTES) -> None:
        self.folder = Path(data_dir) / FOLDER
        self.max_age_days = max_age_days
        self.max_total_bytes = max_total_bytes
        self._lock = threading.Lock()

    def path(self, run_id: str) -> Path:
        """The file of ``run_id``.

        Raises:
            KvpilotError: not a run id (``kvpilot runs`` lists them).
        """
        if not _ID.match(run_id):
            raise KvpilotError(
                f"{run_id!r} is not a run id (like 20260101-120000-ab12); `kvpilot runs` "
                "lists them"
            )
        return self.folder / f"{run_id}.json"

    # ------------------------------------------------------------------ write

    def write(self, record: RunRecord) -> None:
        """Write ``record`` atomically.

        Raises:
            OSError: the folder or file cannot be written (a full disk: the caller decides).
        """
        text = json.dumps(record.to_json(), indent=1, sort_keys=True)
        with self._lock:
            atomic_write_text(self.path(record.id), text + "\n", mode=0o600)

    def add_load_test(self, base_url: str, test: LoadTestSummary) -> RunRecord | None:
        """Append ``test`` to the running record served at ``base_url`` (the newest one);
        returns it, or None when no running run of this data directory serves there (a server
        kvpilot did not start)."""
        want = _url_key(base_url)
        for rec in self.records(mark_lost=True).records:
            if rec.state == RUNNING and _url_key(rec.base_url) == want:
                updated = rec.with_load_test(test)
                try:
                    self.write(updated)
                except OSError as exc:
                    log.warning("the load test was not added to run %s: %s", rec.id, exc)
                    return None
                return updated
        return None

    # ------------------------------------------------------------------ read

    def read(self, run_id: str) -> RunRecord:
        """The record ``run_id``.

        Raises:
            KvpilotError: no such record, or it is damaged (the message says which).
        """
        path = self.path(run_id)
        if not path.is_file():
            raise KvpilotError(f"no run {run_id} in {self.folder}; `kvpilot runs` lists them")
        try:
            return _mark_lost(_load(path))
        except RunRecordError as exc:
            raise KvpilotError(f"run record {path} is damaged ({exc.message})") from exc

    def records(self, *, mark_lost: bool = True) -> RunList:
        """Every readable record, newest first; damaged files are skipped with a warning."""
        try:
            files = sorted(self.folder.glob("*.json"), reverse=True)
        except OSError as exc:
            return RunList((), (f"cannot list {self.folder}: {exc}",))
        out: list[RunRecord] = []
        warnings: list[str] = []
        for path in files:
            if not _ID.match(path.stem):
                continue
            try:
                rec = _load(path)
            except RunRecordError as exc:
                message = f"skipped damaged run record {path.name}: {exc.message}"
                log.warning("%s", message)
                warnings.append(message)
                continue
            out.append(_mark_lost(rec) if mark_lost else rec)
        return RunList(tuple(out), tuple(warnings))

    # ------------------------------------------------------------------ prune

    def prune(self, now_s: float | None = None) -> list[Path]:
        """Remove finished records past the age limit, then the oldest finished ones until
        the folder fits the size limit; returns the files removed. Damaged files count as
        finished (they are pruned by age and size like the others)."""
        now = time.time() if now_s is None else now_s
        entries: list[tuple[float, int, Path, bool]] = []
        try:
            files = list(self.folder.glob("*.json"))
        except OSError:
            return []
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            running = False
            if st.st_size <= MAX_RECORD_BYTES:
                try:
                    running = _mark_lost(_load(path)).state == RUNNING
                except RunRecordError:
                    running = False
            entries.append((st.st_mtime, st.st_size, path, running))
        removed: list[Path] = []
        limit = now - self.max_age_days * 86400.0
        keep: list[tuple[float, int, Path, bool]] = []
        for entry in entries:
            if not entry[3] and entry[0] < limit and _unlink(entry[2]):
                removed.append(entry[2])
            else:
                keep.append(entry)
        total = sum(e[1] for e in keep)
        for mtime, size, path, running in sorted(keep):  # oldest first
            if total <= self.max_total_bytes:
                break
            if running or mtime >= now - 60:  # never the live ones, never one just written
                continue
            if _unlink(path):
                removed.append(path)
                total -= size
        return removed


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True


def _load(path: Path) -> RunRecord:
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise RunRecordError(f"larger than {MAX_RECORD_BYTES >> 20} MiB")
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RunRecordError(f"cannot be read ({exc})") from exc
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise RunRecordError(f"not valid JSON ({exc})") from exc
    return record_from_json(raw)


def _alive(pid: int | None) -> bool:
    if pid is None or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        return psutil.pid_exists(pid)
    except (OSError, psutil.Error):
        return False


def _mark_lost(rec: RunRecord) -> RunRecord:
    """A running record whose kvpilot is gone: ``lost``."""
    if rec.state == RUNNING and not _alive(rec.owner_pid):
        return replace(rec, state=LOST)
    return rec


def _url_key(url: str) -> str:
    text = url.strip().rstrip("/")
    if text.endswith("/v1"):
        text = text[:-3]
    return text.replace("://localhost:", "://127.0.0.1:").lower()
