"""Fetch a checkpoint into the Hugging Face cache before vLLM starts, so vLLM runs offline.

Two steps, both without Qt:

1. :func:`plan_download` asks the Hub (``HfApi.model_info(files_metadata=True)``) for the real
   file list and sizes at one commit, keeps only what vLLM loads (config, tokenizer, generation
   config, ``*.safetensors`` + index; ``*.bin`` only when no safetensors exist; nothing from
   sub-folders such as ``original/``), and marks what the cache already holds. Offline, a
   complete cached snapshot still gives a plan; otherwise the error says the model is not cached.
2. :class:`Downloader` checks the free disk space against the bytes still to fetch, then fetches
   file by file in a thread, reporting :class:`DownloadProgress` events (bytes, smoothed speed,
   ETA). It stops between chunks when its ``cancel_event`` is set.

Why kvpilot moves the bytes itself: ``huggingface_hub`` 1.x/2.x downloads into a
process-unique ``*.incomplete`` file and deletes it on any failure, so an interrupted or
cancelled download of a 15 GB checkpoint would start again from zero. Here the bytes of a blob
go to ``blobs/<etag>.incomplete`` in the standard cache layout and the next run continues with
an HTTP ``Range`` request. ``huggingface_hub`` still does everything else: the per-file HEAD
(etag, commit, size, CDN location, typed Hub errors), authentication headers, and the final
placement (``hf_hub_download`` finds the finished blob and only links it into the snapshot).

The endpoint is ``HF_ENDPOINT`` read at call time (``huggingface_hub`` reads it once, at import).
The launch then uses :attr:`DownloadPlan.snapshot_path` with ``HF_HUB_OFFLINE=1``.

Errors are :class:`~kvpilot.core.hub.download_errors.DownloadError` subclasses with a message
saying what to do; each has a stable ``kind`` string (see the ``KIND_*`` constants there).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Literal, Protocol
from urllib.parse import urlsplit

import httpx
from huggingface_hub import (
    HfApi,
    HfFileMetadata,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
)
from huggingface_hub import errors as hf_errors
from huggingface_hub.utils import WeakFileLock, build_hf_headers

from kvpilot.core.base.paths import mount_point
from kvpilot.core.base.units import size_text
from kvpilot.core.hub.cache import complete_snapshot, hub_cache_dir, repo_folder
from kvpilot.core.hub.download_errors import (
    DiskFullError,
    DownloadCancelled,
    DownloadError,
    DownloadInterruptedError,
    HubUnreachableError,
    ModelNotFoundError,
    NoLoadableWeightsError,
    NotEnoughDiskError,
    hub_error,
    not_a_hub,
    short_error,
)

try:  # huggingface_hub >= 1.0 talks through httpx2; older releases through requests
    import httpx2 as _httpx2

    _HF_NETWORK_ERRORS: tuple[type[BaseException], ...] = (_httpx2.TransportError,)
except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
    _HF_NETWORK_ERRORS = ()

DownloadState = Literal["checking", "downloading", "done", "cancelled", "failed"]

#: top-level files vLLM reads besides the weights (config, tokenizer, templates, remote code)
_SIDE_FILE_PATTERNS = ("*.json", "*.model", "*.txt", "*.jinja", "*.tiktoken", "*.py")
_NOT_NEEDED = ("training_args.bin", "*.bin.index.json", "*.pt.index.json")
_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    httpx.TransportError,
    hf_errors.OfflineModeIsEnabled,
    *_HF_NETWORK_ERRORS,
)
#: hf_hub_download turns a failed HEAD into LocalEntryNotFoundError when the cache lacks the file
_FINALIZE_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    *_NETWORK_ERRORS,
    hf_errors.LocalEntryNotFoundError,
)


# -- records ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannedFile:
    """One file of the plan. ``etag`` names its blob (LFS sha256 or git blob id)."""

    filename: str
    size_bytes: int
    etag: str
    cached: bool
    partial_bytes: int = 0  # bytes already in ``blobs/<etag>.incomplete`` (resumed, not re-sent)

    @property
    def bytes_to_fetch(self) -> int:
        return 0 if self.cached else max(self.size_bytes - self.partial_bytes, 0)


@dataclass(frozen=True)
class DownloadPlan:
    """What a download of ``repo_id`` at ``commit_sha`` has to do. Sizes in bytes."""

    repo_id: str
    revision: str
    commit_sha: str
    endpoint: str
    cache_dir: Path
    files: tuple[PlannedFile, ...]
    skipped_files: tuple[str, ...] = ()
    gated: bool = False
    offline: bool = False  # built from the cache alone (Hub unreachable or HF_HUB_OFFLINE)
    token: str | None = field(default=None, repr=False)

    @property
    def repo_dir(self) -> Path:
        return repo_folder(self.repo_id, self.cache_dir)

    @property
    def snapshot_path(self) -> Path:
        """The folder to give vLLM (``vllm serve <snapshot_path>`` with ``HF_HUB_OFFLINE=1``)."""
        return self.repo_dir / "snapshots" / self.commit_sha

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def bytes_to_fetch(self) -> int:
        """Bytes still to come over the network (partial files count what they lack)."""
        return sum(f.bytes_to_fetch for f in self.files)

    @property
    def cached_bytes(self) -> int:
        """Bytes of the files already complete in the cache."""
        return sum(f.size_bytes for f in self.files if f.cached)

    @property
    def partial_bytes(self) -> int:
        """Bytes already in partial files (kept from an earlier, interrupted run)."""
        return sum(f.partial_bytes for f in self.files if not f.cached)

    @property
    def complete(self) -> bool:
        return all(f.cached for f in self.files)


@dataclass(frozen=True)
class DownloadProgress:
    """One progress report. ``bytes_done`` counts cached and resumed bytes too."""

    state: DownloadState
    bytes_done: int
    bytes_total: int
    bytes_fetched: int  # bytes received over the network in this run
    speed_bytes_per_s: float  # exponentially smoothed (time constant ``SpeedMeter.tau_s``)
    eta_s: float | None  # None while the speed is unknown
    current_file: str | None
    files_done: int
    files_total: int
    error_kind: str | None = None
    message: str | None = None
    snapshot_path: Path | None = None  # set when ``state == "done"``


# -- planning ---------------------------------------------------------------------------------
def resolve_endpoint(endpoint: str | None = None) -> str:
    """The Hub URL to use: the argument, else ``HF_ENDPOINT`` now, else huggingface_hub's."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def select_files(filenames: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split a repository's file list into (files vLLM needs, files to skip).

    Only top-level files count. Weights: every ``*.safetensors`` (``consolidated*`` only when it
    is the sole format, i.e. Mistral-format repos) plus the safetensors index; without
    safetensors, ``*.bin`` then ``*.pt``. Side files: json, tokenizer models, txt, jinja, tiktoken
    and remote-code ``*.py``. Raises :class:`NoLoadableWeightsError` when no weights remain
    (GGUF-only or ``*.pth``-only repositories).
    """
    names = sorted(set(filenames))
    top = [n for n in names if "/" not in n]

    def matching(pattern: str) -> list[str]:
        return [n for n in top if fnmatch.fnmatch(n, pattern)]

    weights = matching("*.safetensors")
    if weights:
        hf_format = [w for w in weights if not w.startswith("consolidated")]
        weights = hf_format or weights
    else:
        weights = [w for w in matching("*.bin") if w != "training_args.bin"] or matching("*.pt")
    if not weights:
        raise NoLoadableWeightsError(
            "the repository has no *.safetensors or PyTorch *.bin weights at its top level; "
            "pick a Hugging Face-format checkpoint of this model (GGUF and original/*.pth "
            "files are not downloaded)"
        )
    side = {
        n
        for pattern in _SIDE_FILE_PATTERNS
        for n in matching(pattern)
        if not any(fnmatch.fnmatch(n, skip) for skip in _NOT_NEEDED)
    }
    if weights[0].endswith(".safetensors"):
        side |= set(matching("*.safetensors.index.json"))
    elif weights[0].endswith(".bin"):
        side |= set(matching("*.bin.index.json"))
    needed = sorted(side | set(weights))
    return needed, [n for n in names if n not in needed]


def plan_download(
    repo_id: str,
    revision: str = "main",
    *,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    allow_patterns: Sequence[str] | None = None,
    endpoint: str | None = None,
) -> DownloadPlan:
    """List the files of ``repo_id`` at ``revision`` that vLLM needs, with sizes and cache state.

    ``allow_patterns`` (fnmatch globs on repo paths) replaces the default selection. ``token``
    None means huggingface_hub's own (``HF_TOKEN`` or the saved login). When something must be
    fetched, one HEAD request on the first file checks access, so a gated repository fails here.

    Raises :class:`GatedModelError`, :class:`ModelNotFoundError`, :class:`HubAuthError`,
    :class:`HubUnreachableError` (offline and not completely cached) or
    :class:`NoLoadableWeightsError`.
    """
    url = resolve_endpoint(endpoint)
    cache = hub_cache_dir(cache_dir)
    if constants.is_offline_mode():
        return _offline_plan(repo_id, revision, url, cache, token, "HF_HUB_OFFLINE is set")
    api = HfApi(endpoint=url, token=token, library_name="kvpilot")
    try:
        info = api.model_info(repo_id, revision=revision, files_metadata=True)
    except _NETWORK_ERRORS as exc:
        reason = f"the Hub at {url} cannot be reached ({short_error(exc)})"
        return _offline_plan(repo_id, revision, url, cache, token, reason)
    except hf_errors.HfHubHTTPError as exc:
        raise hub_error(exc, repo_id, revision, url) from exc
    if not info.sha:
        raise ModelNotFoundError(f"the Hub at {url} gave no commit for {repo_id}@{revision}")
    siblings = {s.rfilename: s for s in info.siblings or []}
    if allow_patterns:
        needed = [n for n in sorted(siblings) if any(fnmatch.fnmatch(n, p) for p in allow_patterns)]
        skipped = [n for n in sorted(siblings) if n not in needed]
        if not needed:
            raise ModelNotFoundError(
                f"no file of {repo_id}@{revision} matches {list(allow_patterns)}; "
                "check the patterns against the files on the model page"
            )
    else:
        needed, skipped = select_files(siblings)

    plan = DownloadPlan(
        repo_id=repo_id,
        revision=revision,
        commit_sha=info.sha,
        endpoint=url,
        cache_dir=cache,
        files=(),
        skipped_files=tuple(skipped),
        gated=bool(info.gated),
        token=token,
    )
    files = []
    for name in needed:
        sib = siblings[name]
        etag = sib.lfs.sha256 if sib.lfs else (sib.blob_id or "")
        size = sib.lfs.size if sib.lfs else (sib.size or 0)
        files.append(_cache_state(plan, name, size, etag))
    plan = replace(plan, files=tuple(files))
    pending = [f for f in plan.files if not f.cached]
    if pending:
        _head(plan, pending[0].filename)  # fail now on gated / forbidden, not after the disk check
    return plan


def _cache_state(plan: DownloadPlan, name: str, size: int, etag: str) -> PlannedFile:
    pointer = plan.snapshot_path / name
    blob = plan.repo_dir / "blobs" / etag
    cached = pointer.exists() or (bool(etag) and blob.exists())
    partial = 0
    if not cached and etag:
        try:
            partial = min((blob.parent / f"{etag}.incomplete").stat().st_size, size)
        except OSError:
            partial = 0
    return PlannedFile(name, size, etag, cached, partial)


def _offline_plan(
    repo_id: str, revision: str, endpoint: str, cache: Path, token: str | None, reason: str
) -> DownloadPlan:
    snap = complete_snapshot(repo_id, revision, cache)
    if snap is None:
        raise HubUnreachableError(
            f"{reason}, and {repo_id}@{revision} is not completely in the Hugging Face cache "
            f"({cache}); connect to the network (check HF_ENDPOINT and proxy settings) or "
            "choose a model that is already downloaded"
        )
    files = tuple(
        PlannedFile(p.name, p.stat().st_size, "", True)
        for p in sorted(snap.iterdir())
        if p.is_file()
    )
    return DownloadPlan(
        repo_id=repo_id,
        revision=revision,
        commit_sha=snap.name,
        endpoint=endpoint,
        cache_dir=cache,
        files=files,
        offline=True,
        token=token,
    )


# -- disk -------------------------------------------------------------------------------------
class DiskUsage(Protocol):
    """What :func:`shutil.disk_usage` returns, as far as kvpilot reads it."""

    @property
    def free(self) -> int: ...


DiskUsageFn = Callable[[str], DiskUsage]


def check_disk_space(plan: DownloadPlan, *, disk_usage: DiskUsageFn = shutil.disk_usage) -> int:
    """Return the free bytes of the cache's file system, or raise :class:`NotEnoughDiskError`.

    The need is the plan's ``bytes_to_fetch`` (already cached and partial bytes excluded). The
    cache folder may not exist yet: its nearest existing parent is measured.
    """
    where = plan.cache_dir.resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    free = int(disk_usage(str(where)).free)
    need = plan.bytes_to_fetch
    if need > free:
        raise NotEnoughDiskError(
            f"not enough disk space for {plan.repo_id}: the download needs {_size(need)} but "
            f"{where} has only {_size(free)} free; free {_size(need - free)} or set another "
            "Hugging Face cache folder (Settings, or HF_HUB_CACHE)",
            needed_bytes=need,
            free_bytes=free,
            path=where,
        )
    return free


# -- progress ---------------------------------------------------------------------------------
class SpeedMeter:
    """Exponentially smoothed transfer rate; ``tau_s`` is the smoothing time constant."""

    def __init__(self, *, tau_s: float = 3.0) -> None:
        self.tau_s = tau_s
        self.bytes_per_s = 0.0
        self._last: tuple[float, int] | None = None

    def update(self, now_s: float, total_bytes: int) -> float:
        """Feed the cumulative byte count at time ``now_s``; return the smoothed rate."""
        if self._last is None:
            self._last = (now_s, total_bytes)
            return self.bytes_per_s
        then, before = self._last
        dt = now_s - then
        if dt <= 0:
            return self.bytes_per_s
        rate = (total_bytes - before) / dt
        if self.bytes_per_s == 0.0:
            self.bytes_per_s = rate
        else:
            self.bytes_per_s += (1.0 - math.exp(-dt / self.tau_s)) * (rate - self.bytes_per_s)
        self._last = (now_s, total_bytes)
        return self.bytes_per_s


def _open_for_append(path: Path) -> BinaryIO:
    return path.open("ab")


# -- the downloader ---------------------------------------------------------------------------
class Downloader:
    """Fetch what a :class:`DownloadPlan` lacks, reporting :class:`DownloadProgress` events.

    ``on_progress`` is called from the thread running the download (the one started by
    :meth:`start`, or the caller of :meth:`run`), at most every ``min_interval_s`` while bytes
    flow and always on state changes and file boundaries. Setting ``cancel_event`` stops the
    download between chunks; the partial file stays in the cache and the next run resumes it.
    A connection that breaks mid-file is resumed with ``Range`` up to ``max_retries`` times in a
    row (the count resets whenever bytes arrive).

    ``disk_usage`` and ``open_file`` can be replaced (tests, odd file systems).
    """

    def __init__(
        self,
        plan: DownloadPlan,
        on_progress: Callable[[DownloadProgress], None],
        cancel_event: threading.Event | None = None,
        *,
        disk_usage: DiskUsageFn = shutil.disk_usage,
        open_file: Callable[[Path], BinaryIO] = _open_for_append,
        max_retries: int = 3,
        retry_delay_s: float = 0.5,
        min_interval_s: float = 0.1,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.plan = plan
        self.cancel_event = cancel_event or threading.Event()
        self._on_progress = on_progress
        self._disk_usage = disk_usage
        self._open_file = open_file
        self._max_retries = max_retries
        self._retry_delay_s = retry_delay_s
        self._min_interval_s = min_interval_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._meter = SpeedMeter()
        self._thread: threading.Thread | None = None
        self._result: Path | None = None
        self._error: BaseException | None = None
        self._done_bytes = plan.cached_bytes + plan.partial_bytes
        self._fetched = 0
        self._files_done = sum(1 for f in plan.files if f.cached)
        self._current: str | None = None
        self._last_emit = -math.inf

    # -- public ---------------------------------------------------------------------------
    def start(self) -> None:
        """Run the download in a daemon thread; collect the outcome with :meth:`wait`."""
        if self._thread is not None:
            raise RuntimeError("this Downloader was already started")
        self._thread = threading.Thread(
            target=self._run_quietly, name="kvpilot-download", daemon=True
        )
        self._thread.start()

    def wait(self, timeout_s: float | None = None) -> Path:
        """Block until the thread ends; return the snapshot path or raise its DownloadError."""
        if self._thread is None:
            raise RuntimeError("start() was not called")
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"download still running after {timeout_s} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run(self) -> Path:
        """Download in the calling thread; return the snapshot path.

        Raises :class:`NotEnoughDiskError` before any byte moves, :class:`DownloadCancelled`,
        and the other :class:`DownloadError` subclasses (the last event is ``failed``).
        """
        try:
            self._emit("checking", force=True)
            if not self.plan.offline:
                check_disk_space(self.plan, disk_usage=self._disk_usage)
                self._fetch_all()
            self._emit("done", force=True)
        except DownloadCancelled as exc:
            self._emit("cancelled", force=True, error=exc)
            raise
        except DownloadError as exc:
            self._emit("failed", force=True, error=exc)
            raise
        except Exception as exc:  # a bug or an unforeseen library error: still report it
            self._emit("failed", force=True, error=DownloadError(f"download failed: {exc!r}"))
            raise
        return self.plan.snapshot_path

    # -- internals ------------------------------------------------------------------------
    def _run_quietly(self) -> None:
        try:
            self._result = self.run()
        except Exception as exc:  # noqa: BLE001 - wait() re-raises it in the caller's thread
            self._error = exc

    def _fetch_all(self) -> None:
        headers = build_hf_headers(token=self.plan.token, library_name="kvpilot")
        headers["Accept-Encoding"] = "identity"
        with httpx.Client(timeout=self._timeout_s, follow_redirects=True) as client:
            # small files first: config and tokenizer are usable early, weights resume last
            for planned in sorted(self.plan.files, key=lambda f: f.size_bytes):
                self._check_cancel()
                if planned.cached and (self.plan.snapshot_path / planned.filename).exists():
                    continue
                self._current = planned.filename
                self._emit("downloading", force=True)
                self._fetch_file(client, headers, planned)
                self._files_done += 0 if planned.cached else 1
        self._write_ref()
        self._current = None

    def _fetch_file(
        self, client: httpx.Client, headers: dict[str, str], planned: PlannedFile
    ) -> None:
        plan = self.plan
        meta = _head(plan, planned.filename)
        etag = meta.etag or planned.etag
        size = meta.size if meta.size is not None else planned.size_bytes
        blob = plan.repo_dir / "blobs" / etag
        if not blob.exists():
            blob.parent.mkdir(parents=True, exist_ok=True)
            lock = plan.cache_dir / ".locks" / plan.repo_dir.name / f"{etag}.lock"
            lock.parent.mkdir(parents=True, exist_ok=True)
            with WeakFileLock(lock):
                if not blob.exists():
                    self._fetch_blob(client, headers, meta.location, blob, planned, size)
        with _hub_errors(plan, _FINALIZE_NETWORK_ERRORS, self._unreachable):
            hf_hub_download(
                plan.repo_id,
                planned.filename,
                revision=plan.commit_sha,
                cache_dir=plan.cache_dir,
                token=plan.token,
                endpoint=plan.endpoint,
            )  # the blob is complete: this only links it into snapshots/<commit>/

    def _fetch_blob(
        self,
        client: httpx.Client,
        headers: dict[str, str],
        url: str,
        blob: Path,
        planned: PlannedFile,
        size: int,
    ) -> None:
        partial = blob.with_name(blob.name + ".incomplete")
        have = partial.stat().st_size if partial.exists() else 0
        if have > size:
            partial.unlink()
            have = 0
        # what the progress counter already holds for this file (planned partial bytes)
        self._done_bytes += have - (
            planned.partial_bytes if not planned.cached else planned.size_bytes
        )
        request_headers = dict(headers)
        if _origin(url) != _origin(self.plan.endpoint):
            request_headers.pop("authorization", None)  # signed CDN links take no Hub token
        retries = 0
        while have < size:
            self._check_cancel()
            before = have
            problem = "the server ended the transfer early"
            try:
                self._stream(client, url, request_headers, partial, have)
            except _NETWORK_ERRORS as exc:
                problem = short_error(exc)
            have = partial.stat().st_size if partial.exists() else 0
            if have >= size:
                break
            retries = 1 if have > before else retries + 1  # failures since bytes last arrived
            if retries > self._max_retries:
                raise DownloadInterruptedError(
                    f"the connection broke while downloading {planned.filename} "
                    f"({_size(have)} of {_size(size)} kept; {problem}); start the download "
                    "again to resume it"
                )
            if self.cancel_event.wait(self._retry_delay_s * 2 ** max(retries - 1, 0)):
                self._check_cancel()
        if have != size:
            partial.unlink()
            raise DownloadInterruptedError(
                f"{planned.filename} arrived with {have} bytes instead of {size}; start the "
                "download again"
            )
        partial.replace(blob)

    def _stream(
        self,
        client: httpx.Client,
        url: str,
        headers: dict[str, str],
        partial: Path,
        have: int,
    ) -> int:
        """One GET from byte ``have``; append to ``partial``; return the bytes now on disk."""
        if have:
            headers = {**headers, "Range": f"bytes={have}-"}
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code >= 400:
                raise DownloadError(
                    f"the download server answered {response.status_code} for {url}; "
                    "try again later"
                )
            fh = self._open_file(partial)
            try:
                if have and response.status_code == 200:  # Range ignored: whole file again
                    fh.seek(0)
                    fh.truncate()
                    self._done_bytes -= have
                    have = 0
                for chunk in response.iter_bytes():
                    if self.cancel_event.is_set():
                        break
                    fh.write(chunk)
                    have += len(chunk)
                    self._done_bytes += len(chunk)
                    self._fetched += len(chunk)
                    self._emit("downloading")
                fh.close()  # a full disk may show only here, when the buffer is flushed
            except OSError as exc:
                with contextlib.suppress(OSError):
                    fh.close()  # what the buffer still held is lost; the file keeps the rest
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise self._disk_full(partial, have, exc) from exc
                raise DownloadError(f"cannot write {partial}: {exc.strerror or exc}") from exc
            finally:
                with contextlib.suppress(OSError):
                    fh.close()
        self._check_cancel()
        return have

    def _disk_full(self, partial: Path, have: int, exc: OSError) -> DiskFullError:
        """The one sentence for a disk that filled up mid-download: which disk, how much the
        download still needs and how much is free, and that the partial file is kept.
        ``have``: the bytes of ``partial`` counted so far (some may not have reached the disk)."""
        mount = mount_point(self.plan.cache_dir)
        kept = partial.stat().st_size if partial.exists() else 0
        self._done_bytes += kept - have  # the disk holds what it holds: a buffer lost, a chunk cut
        needed = max(0, self.plan.total_bytes - self._done_bytes)
        try:
            free: int | None = int(self._disk_usage(str(mount)).free)
        except OSError:
            free = None
        free_text = "an unknown amount" if free is None else _size(free)
        short = needed if free is None else max(0, needed - free)
        fix = f"free at least {_size(short)}" if short else "free some space"
        return DiskFullError(
            f"the disk holding the Hugging Face cache {self.plan.cache_dir} (mounted at "
            f"{mount}) is full ({exc.strerror or 'no space left'}): {self.plan.repo_id} still "
            f"needs {_size(needed)} and {free_text} is free there; {fix} there "
            f"or set another cache folder (Settings, or HF_HUB_CACHE), then start "
            f"the download again: the {_size(kept)} already written are kept in {partial} and "
            "it resumes from there",
            needed_bytes=needed,
            free_bytes=free,
            mount=mount,
            partial_path=partial,
        )

    def _check_cancel(self) -> None:
        if self.cancel_event.is_set():
            raise DownloadCancelled(
                f"download of {self.plan.repo_id} cancelled; {_size(self._done_bytes)} of "
                f"{_size(self.plan.total_bytes)} kept in the cache, starting again resumes it"
            )

    def _write_ref(self) -> None:
        plan = self.plan
        if plan.revision != plan.commit_sha:
            ref = plan.repo_dir / "refs" / plan.revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            ref.write_text(plan.commit_sha)

    def _unreachable(self, exc: BaseException) -> HubUnreachableError:
        missing = len(self.plan.files) - self._files_done
        return HubUnreachableError(
            f"the Hub at {self.plan.endpoint} cannot be reached ({short_error(exc)}); "
            f"{missing} file(s) of {self.plan.repo_id} are not in the cache yet, so it cannot "
            "start offline; check the network and start the download again, it resumes where it "
            "stopped"
        )

    def _emit(
        self, state: DownloadState, *, force: bool = False, error: DownloadError | None = None
    ) -> None:
        now = self._clock()
        if not force and now - self._last_emit < self._min_interval_s:
            return
        self._last_emit = now
        speed = self._meter.update(now, self._fetched)
        remaining = self.plan.total_bytes - self._done_bytes
        eta: float | None = None
        if state == "done" or remaining <= 0:
            eta = 0.0
        elif speed > 0:
            eta = remaining / speed
        self._on_progress(
            DownloadProgress(
                state=state,
                bytes_done=self._done_bytes,
                bytes_total=self.plan.total_bytes,
                bytes_fetched=self._fetched,
                speed_bytes_per_s=speed,
                eta_s=eta,
                current_file=self._current,
                files_done=self._files_done,
                files_total=len(self.plan.files),
                error_kind=error.kind if error else None,
                message=error.message if error else None,
                snapshot_path=self.plan.snapshot_path if state == "done" else None,
            )
        )


def ensure_downloaded(
    repo_id: str,
    revision: str = "main",
    *,
    token: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    endpoint: str | None = None,
    on_progress: Callable[[DownloadProgress], None] | None = None,
    cancel_event: threading.Event | None = None,
    disk_usage: DiskUsageFn = shutil.disk_usage,
) -> Path:
    """Return a complete local snapshot of ``repo_id``, downloading what is missing (blocking).

    A complete cached snapshot of ``revision`` is used without asking the Hub. Raises the
    errors of :func:`plan_download` and :meth:`Downloader.run`.
    """
    cached = complete_snapshot(repo_id, revision, cache_dir)
    if cached is not None:
        return cached
    plan = plan_download(repo_id, revision, token=token, cache_dir=cache_dir, endpoint=endpoint)
    sink = on_progress or (lambda _event: None)
    return Downloader(plan, sink, cancel_event, disk_usage=disk_usage).run()


# -- helpers ----------------------------------------------------------------------------------
def _head(plan: DownloadPlan, filename: str) -> HfFileMetadata:
    """HEAD one file at the plan's commit (etag, size, CDN location); typed errors."""
    url = hf_hub_url(plan.repo_id, filename, revision=plan.commit_sha, endpoint=plan.endpoint)

    def unreachable(exc: BaseException) -> HubUnreachableError:
        return HubUnreachableError(
            f"the Hub at {plan.endpoint} cannot be reached ({short_error(exc)}) and "
            f"{plan.repo_id} is not completely in the cache; check the network and try again"
        )

    with _hub_errors(plan, _NETWORK_ERRORS, unreachable):
        return get_hf_file_metadata(url, token=plan.token, endpoint=plan.endpoint)


@contextlib.contextmanager
def _hub_errors(
    plan: DownloadPlan,
    network_errors: tuple[type[BaseException], ...],
    unreachable: Callable[[BaseException], HubUnreachableError],
) -> Iterator[None]:
    """Turn what a call to the Hub for ``plan`` raises into a :class:`DownloadError`:
    ``network_errors`` into ``unreachable(exc)``, an answer that is not the Hub's into
    :func:`_not_a_hub`'s, a Hub error into :func:`_translate_hub_error`'s."""
    try:
        yield
    except network_errors as exc:
        raise unreachable(exc) from exc
    except hf_errors.FileMetadataError as exc:
        raise not_a_hub(plan.endpoint, exc) from exc
    except hf_errors.HfHubHTTPError as exc:
        raise hub_error(exc, plan.repo_id, plan.revision, plan.endpoint) from exc


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _size(n_bytes: int) -> str:
    """Human size with decimal units (what file managers and the Hub page show)."""
    return size_text(n_bytes)
