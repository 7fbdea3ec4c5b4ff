"""A local stand-in for the Hugging Face Hub, for download tests (127.0.0.1 only).

It answers only what ``huggingface_hub`` and kvpilot's downloader actually call:

* ``GET /api/models/<repo>[/revision/<rev>]?blobs=true``: model info with every file's size,
  git blob id and LFS metadata (the JSON shape the Hub returns).
* ``HEAD|GET /<repo>/resolve/<rev>/<file>``: the headers ``huggingface_hub`` reads
  (``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag`` / ``X-Linked-Size`` for LFS files,
  ``Content-Length``, ``Accept-Ranges``), 206 answers to ``Range`` requests, and, like the real
  Hub, a 302 for LFS files to a separate "CDN" server on another port.
* ``GET /api/models?search=&pipeline_tag=&filter=&sort=&limit=&expand=``: the model listing
  (search text in the repo id, pipeline tag, tags such as ``base_model:quantized:<id>``, sorted
  by downloads or trending score), each repo with what ``expand`` asks for: its commit, the
  Hub's safetensors parameter count per dtype, and the part of its ``config.json`` the Hub
  lists (``architectures``, ``model_type``, ``quantization_config``).
* the Hub's error answers: ``X-Error-Code`` RepoNotFound / RevisionNotFound / EntryNotFound /
  GatedRepo and a 401 "Invalid credentials in Authorization header" for a rejected token.

``xet=True`` also sends the Xet headers (``X-Xet-Hash``, ``X-Xet-Refresh-Route``) the Hub sends
for files in Xet storage, so that ``huggingface_hub`` takes its Xet path when ``hf_xet`` is
installed and its plain-HTTP fallback when it is not.

Faults for tests: ``drop_after`` cuts the connection after N body bytes of a file (one shot),
``ignore_range`` answers 200 with the whole file to a ``Range`` request. Every request is
recorded (``requests``) with its ``Range`` and ``Authorization`` headers and the body bytes sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from kvpilot.core.base.background import StartStop

LFS_MIN_BYTES = 1024 * 1024  # files at least this big are served as LFS (like *.safetensors)
_SEND_BLOCK_BYTES = 64 * 1024
_RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)$")


def git_blob_id(content: bytes) -> str:
    """The git object id of a file's content (what the Hub reports as ``blobId``)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class FakeRepo:
    """One model repository: files by path, one commit, branch names pointing at it."""

    repo_id: str
    files: dict[str, bytes]
    sha: str
    branches: tuple[str, ...] = ("main",)
    gated: bool = False
    allowed_tokens: set[str] = field(default_factory=set)  # tokens that accepted the licence
    #: listing facts (``/api/models``): pipeline tag, tags, downloads, trending score, creation
    pipeline_tag: str = "text-generation"
    tags: tuple[str, ...] = ()
    downloads: int = 0
    trending_score: int = 0
    created_at: str = "2025-01-01T00:00:00.000Z"
    #: the Hub's safetensors parameter count per dtype (None: read from the files' headers)
    safetensors_parameters: dict[str, int] | None = None

    def is_lfs(self, path: str) -> bool:
        return len(self.files[path]) >= LFS_MIN_BYTES or path.endswith(".safetensors")

    def resolves(self, revision: str) -> bool:
        return revision == self.sha or revision in self.branches


@dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it."""

    server: str  # "hub" or "cdn"
    method: str
    path: str
    status: int
    range_header: str | None
    authorization: str | None
    body_bytes_sent: int
    query: str = ""


class FakeHub(StartStop):
    """Hub + CDN servers in daemon threads; use as a context manager."""

    def __init__(
        self, *, cdn: bool = True, valid_tokens: set[str] | None = None, xet: bool = False
    ) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.xet = xet
        self.valid_tokens: set[str] = set(valid_tokens or ())
        self.drop_after: dict[str, int] = {}  # file path -> body bytes sent before the cut
        self.ignore_range = False
        self.chunk_delay_s = 0.0
        self.requests: list[RequestRecord] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._use_cdn = cdn
        self._hub = _make_server(self, "hub")
        self._cdn = _make_server(self, "cdn")
        self._threads: list[threading.Thread] = []

    # -- set-up ----------------------------------------------------------------------------
    def add_repo(
        self, repo_id: str, files: dict[str, bytes], *, gated: bool = False, sha: str | None = None
    ) -> FakeRepo:
        commit = sha or hashlib.sha1(repo_id.encode()).hexdigest()
        repo = FakeRepo(repo_id=repo_id, files=dict(files), sha=commit, gated=gated)
        self.repos[repo_id] = repo
        return repo

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_address[1]}"

    def start(self) -> FakeHub:
        for server in (self._hub, self._cdn):
            thread = threading.Thread(
                target=server.serve_forever, args=(0.05,), daemon=True, name="fake-hub"
            )
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.close_all()
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- inspection ------------------------------------------------------------------------
    def downloads_of(self, path_suffix: str) -> list[RequestRecord]:
        """GET requests whose path ends with ``path_suffix`` (hub or CDN), in order."""
        return [r for r in self.settled() if r.method == "GET" and r.path.endswith(path_suffix)]

    def settled(self, timeout_s: float = 5.0) -> list[RequestRecord]:
        """All requests, once every request the server has begun is recorded.

        A client can have read a whole answer before the handler thread records it.
        """
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout_s)
            return list(self.requests)

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def record(self, rec: RequestRecord) -> None:
        with self._idle:
            self.requests.append(rec)
            self._in_flight -= 1
            self._idle.notify_all()

    def cdn_path(self, repo: FakeRepo, path: str) -> str:
        return "/cdn/" + hashlib.sha256(repo.files[path]).hexdigest()

    def find_blob(self, sha256: str) -> tuple[FakeRepo, str] | None:
        for repo in self.repos.values():
            for path, content in repo.files.items():
                if hashlib.sha256(content).hexdigest() == sha256:
                    return repo, path
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.open_connections: set[socket.socket] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        self.open_connections.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        """Cut keep-alive connections too, so a stopped hub is really unreachable."""
        for conn in list(self.open_connections):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    # socketserver's override: its signature, arguments unused
    def handle_error(self, request: Any, client_address: Any) -> None:  # noqa: ARG002
        return  # clients that reset a connection are part of the tests


def _make_server(hub: FakeHub, name: str) -> _Server:
    handler = type(f"{name.title()}Handler", (_Handler,), {"hub": hub, "server_name": name})
    return _Server(handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: FakeHub
    server_name: str

    # http.server's override: its signature, arguments unused (no request log)
    def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
        return

    def do_HEAD(self) -> None:
        self._dispatch(body=False)

    def do_GET(self) -> None:
        self._dispatch(body=True)

    # -- routing ---------------------------------------------------------------------------
    def _dispatch(self, *, body: bool) -> None:
        self.hub.begin()
        self._body = body
        self._sent = 0
        self._status = 0
        path = unquote(urlsplit(self.path).path)
        try:
            if self.server_name == "cdn":
                self._serve_cdn(path)
            elif not self._token_ok():
                self._error(401, message="Invalid credentials in Authorization header")
            elif path == "/api/models":
                self._serve_listing(urlsplit(self.path).query)
            elif path.startswith("/api/models/"):
                self._serve_info(path[len("/api/models/") :])
            elif "/resolve/" in path:
                self._serve_resolve(path.lstrip("/"))
            else:
                self._error(404, code="RepoNotFound")
        finally:
            self.hub.record(
                RequestRecord(
                    server=self.server_name,
                    method=self.command,
                    path=path,
                    status=self._status,
                    range_header=self.headers.get("Range"),
                    authorization=self.headers.get("Authorization"),
                    body_bytes_sent=self._sent,
                    query=unquote(urlsplit(self.path).query),
                )
            )

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization")
        return auth.split(" ", 1)[1] if auth and auth.startswith("Bearer ") else None

    def _token_ok(self) -> bool:
        token = self._token()
        return token is None or token in self.hub.valid_tokens

    def _find_repo(self, rest: str) -> tuple[FakeRepo, str] | None:
        for repo_id, repo in self.hub.repos.items():
            if rest == repo_id or rest.startswith(repo_id + "/"):
                return repo, rest[len(repo_id) :].lstrip("/")
        return None

    def _serve_info(self, rest: str) -> None:
        found = self._find_repo(rest)
        if found is None:
            self._error(404, code="RepoNotFound")
            return
        repo, tail = found
        revision = tail[len("revision/") :] if tail.startswith("revision/") else "main"
        if not repo.resolves(revision):
            self._error(404, code="RevisionNotFound")
            return
        siblings = []
        for path, content in repo.files.items():
            entry: dict[str, object] = {
                "rfilename": path,
                "size": len(content),
                "blobId": git_blob_id(content),
            }
            if repo.is_lfs(path):
                entry["lfs"] = {
                    "size": len(content),
                    "sha256": hashlib.sha256(content).hexdigest(),
                    "pointerSize": 134,
                }
            siblings.append(entry)
        info = {
            "id": repo.repo_id,
            "sha": repo.sha,
            "private": False,
            "gated": "manual" if repo.gated else False,
            "siblings": siblings,
            **_listing_fields(repo),
        }
        self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

    def _serve_listing(self, query: str) -> None:
        params = parse_qs(query)
        text = (params.get("search") or [""])[0].lower()
        tag = (params.get("pipeline_tag") or [""])[0]
        filters = params.get("filter") or []
        sort = (params.get("sort") or ["downloads"])[0]
        limit = int((params.get("limit") or ["1000"])[0])
        found = [
            r for r in self.hub.repos.values()
            if text in r.repo_id.lower() and (not tag or r.pipeline_tag == tag)
            and all(f in r.tags for f in filters)
        ]
        key = "trending_score" if sort == "trendingScore" else "downloads"
        found.sort(key=lambda r: -getattr(r, key))
        body = [{"id": r.repo_id, "_id": r.sha[:24], "modelId": r.repo_id,
                 **_listing_fields(r)} for r in found[:limit]]
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _serve_resolve(self, rest: str) -> None:
        head, _, tail = rest.partition("/resolve/")
        repo = self.hub.repos.get(head)
        if repo is None:
            self._error(404, code="RepoNotFound")
            return
        revision, _, path = tail.partition("/")
        if not repo.resolves(revision):
            self._error(404, code="RevisionNotFound")
            return
        if repo.gated and self._token() not in repo.allowed_tokens:
            status = 401 if self._token() is None else 403
            self._error(
                status,
                code="GatedRepo",
                message=f"Access to model {repo.repo_id} is restricted. You must have access to it"
                " and be authenticated to access it. Please log in.",
            )
            return
        if path not in repo.files:
            self._error(404, code="EntryNotFound", extra={"X-Repo-Commit": repo.sha})
            return
        content = repo.files[path]
        headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{git_blob_id(content)}"'}
        if repo.is_lfs(path):
            headers["X-Linked-Etag"] = f'"{hashlib.sha256(content).hexdigest()}"'
            headers["X-Linked-Size"] = str(len(content))
            if self.hub.xet:
                headers["X-Xet-Hash"] = hashlib.sha256(b"xet" + content).hexdigest()
                headers["X-Xet-Refresh-Route"] = (
                    f"{self.hub.endpoint}/api/models/{repo.repo_id}/xet-read-token/{repo.sha}"
                )
            if self.hub._use_cdn:
                headers["Location"] = self.hub.cdn_endpoint + self.hub.cdn_path(repo, path)
                self._send(302, b"", headers)
                return
        self._send_content(path, content, headers)

    def _serve_cdn(self, path: str) -> None:
        found = self.hub.find_blob(path.rsplit("/", 1)[-1])
        if not path.startswith("/cdn/") or found is None:
            self._send(404, b"Not Found", {})
            return
        repo, file_path = found
        content = repo.files[file_path]
        self._send_content(file_path, content, {"ETag": f'"{hashlib.sha256(content).hexdigest()}"'})

    # -- bodies ----------------------------------------------------------------------------
    def _send_content(self, path: str, content: bytes, headers: dict[str, str]) -> None:
        headers = {**headers, "Accept-Ranges": "bytes"}
        start = 0
        range_header = self.headers.get("Range")
        if range_header and not self.hub.ignore_range:
            match = _RANGE_RE.match(range_header.strip())
            if match is None or int(match.group(1)) >= len(content):
                headers["Content-Range"] = f"bytes */{len(content)}"
                self._send(416, b"", headers)
                return
            start = int(match.group(1))
            end = int(match.group(2)) if match.group(2) else len(content) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(content)}"
            self._send(206, content[start : end + 1], headers, drop_key=path)
            return
        self._send(200, content, headers, drop_key=path)

    def _error(
        self,
        status: int,
        *,
        code: str | None = None,
        message: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        headers = dict(extra or {})
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        body = json.dumps({"error": message or code or "error"}).encode()
        self._send(status, body, {**headers, "Content-Type": "application/json"})

    def _send(
        self, status: int, body: bytes, headers: dict[str, str], *, drop_key: str | None = None
    ) -> None:
        self._status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not self._body or not body:
            return
        cut = self.hub.drop_after.pop(drop_key, None) if drop_key else None
        limit = len(body) if cut is None else min(cut, len(body))
        offset = 0
        try:
            while offset < limit:
                block = body[offset : min(offset + _SEND_BLOCK_BYTES, limit)]
                self.wfile.write(block)
                offset += len(block)
                self._sent = offset
                if self.hub.chunk_delay_s:
                    time.sleep(self.hub.chunk_delay_s)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if cut is not None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)


def _safetensors_parameters(repo: FakeRepo) -> dict[str, int] | None:
    """Parameters per dtype, as the Hub counts them from the safetensors headers."""
    if repo.safetensors_parameters is not None:
        return repo.safetensors_parameters
    counts: dict[str, int] = {}
    for path, content in repo.files.items():
        if not path.endswith(".safetensors") or len(content) < 8:
            continue
        size = int.from_bytes(content[:8], "little")
        try:
            header = json.loads(content[8 : 8 + size])
        except ValueError:  # bytes that are no safetensors file: the Hub counts nothing
            continue
        if not isinstance(header, dict):
            continue
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            n = 1
            for dim in tensor["shape"]:
                n *= dim
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + n
    return counts or None


def _listing_fields(repo: FakeRepo) -> dict[str, Any]:
    """What the Hub lists of a repo besides its id (the ``expand`` fields)."""
    fields: dict[str, Any] = {
        "sha": repo.sha, "pipeline_tag": repo.pipeline_tag, "tags": list(repo.tags),
        "downloads": repo.downloads, "trendingScore": repo.trending_score,
        "createdAt": repo.created_at, "gated": "manual" if repo.gated else False,
        "private": False,
    }
    params = _safetensors_parameters(repo)
    if params is not None:
        fields["safetensors"] = {"parameters": params, "total": sum(params.values())}
    raw = repo.files.get("config.json")
    if raw is not None:
        config = json.loads(raw)
        fields["config"] = {k: config[k] for k in ("architectures", "model_type",
                                                   "quantization_config") if k in config}
    return fields


def isolate_hf(monkeypatch: pytest.MonkeyPatch, root: Path, endpoint: str | None) -> Path:
    """Point huggingface_hub at ``root`` (cache, home, token) and at ``endpoint``; no telemetry.

    huggingface_hub reads its environment once, at import, into ``constants``: both the
    environment and those constants are patched. Returns the hub cache folder.
    """
    from huggingface_hub import constants

    home = root / "hf-home"
    cache = home / "hub"
    env = {
        "HF_HOME": str(home),
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_HUB_DISABLE_XET": "1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(key, raising=False)
    if endpoint is None:
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    return cache
