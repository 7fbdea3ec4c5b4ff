"""``kvpilot front`` on the real vLLM CPU engine: two tiny profiles (the tiny checkpoint served as
``tiny-a`` and ``tiny-b``) and one that cannot start (a context above the model's), behind one
address, run as a user runs it (a process reading the settings file), stopped by SIGTERM.

The first front lets the planner decide: on the CPU backend both tiny profiles fit together, so
they stack; the second is held to one loaded profile (``--max-loaded 1``), so they swap. Each
profile start takes the tiny model 30-60 s on two cores; the assertions share the fronts.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from ports import free_port

from kvpilot.core.app.settings import Profile, Settings, SettingsStore
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.runs.store import RunStore

from .conftest import KV_CACHE_BYTES, READY_TIMEOUT_S, vllm_executable_for_tests
from .servekit import kvpilot_argv, serve_env

#: a request waits for its profile to start: with two servers on two shared cores, a start can
#: take several times the single server's ready time
ASK_TIMEOUT_S = 3 * READY_TIMEOUT_S
TINY = dict(max_model_len=1024, max_num_seqs=4, kv_cache_memory_bytes=KV_CACHE_BYTES,
            enforce_eager=True, dtype="float32")
#: the tiny checkpoint's max_position_embeddings is 2048: vLLM refuses 4096 at start-up
TOO_LONG = {**TINY, "max_model_len": 4096}


@dataclass
class Front:
    proc: subprocess.Popen[str]
    url: str
    data: Path

    def status(self) -> dict:
        return httpx.get(f"{self.url}/front/status", timeout=10).json()

    def states(self) -> dict[str, str]:
        return {p["profile"]: p["state"] for p in self.status()["profiles"]}

    def ask(self, model: str, timeout_s: float = ASK_TIMEOUT_S) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/completions", timeout=timeout_s, json={
            "model": model, "prompt": "one two three", "max_tokens": 4, "temperature": 0})

    def server_pids(self) -> set[int]:
        """vLLM processes under the front (its children's trees)."""
        parent = psutil.Process(self.proc.pid)
        return {p.pid for p in parent.children(recursive=True)}

    def stop(self) -> set[int]:
        """SIGTERM, as a service manager stops it; returns the pids that were under it."""
        pids = self.server_pids() | _session_pids(self)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(120)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return pids


def _session_pids(front: Front) -> set[int]:
    """The vLLM servers the front started run in their own sessions: find them by the pidfiles'
    process groups under the front's data dir (any process whose parent chain leads to the
    front, or whose command line names the front's data dir)."""
    out = set()
    for p in psutil.process_iter(["pid", "cmdline", "environ"]):
        try:
            env = p.info.get("environ") or {}
            if env.get("KVPILOT_DATA_DIR") == str(front.data):
                out.add(p.info["pid"])
        except (psutil.Error, TypeError):
            continue
    out.discard(front.proc.pid)
    return out


def _alive(pids: set[int], wait_s: float = 10.0) -> list[int]:
    """The pids still running after up to ``wait_s`` (a zombie waiting for init to reap it
    has ended: it holds no memory and runs nothing)."""

    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + wait_s
    while True:
        left = sorted(p for p in pids if running(p))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _settings(config: Path, tiny_model: Path) -> None:
    exe, _ = vllm_executable_for_tests()
    common = {"model_ref": str(tiny_model), "vllm_runtime": str(exe)}
    SettingsStore(config).save(Settings(profiles=(
        Profile(name="tiny-a", served_model_name="tiny-a", plan=ServingSettings(**TINY),
                **common),
        Profile(name="tiny-b", served_model_name="tiny-b", plan=ServingSettings(**TINY),
                **common),
        Profile(name="broken", served_model_name="broken", plan=ServingSettings(**TOO_LONG),
                **common),
    ), active_profile="tiny-a"))


def _start_front(tmp: Path, vllm_scratch: Path, tiny_model: Path, *flags: str) -> Front:
    config, data = tmp / "config", tmp / "data"
    _settings(config, tiny_model)
    port = free_port(18700)
    env = {**serve_env(vllm_scratch, data), "KVPILOT_CONFIG_DIR": str(config),
           "KVPILOT_SECRETS": "settings-file"}
    env.pop("KVPILOT_API_KEY", None)
    argv = kvpilot_argv("front", "--profile", "tiny-a", "--profile", "tiny-b", "--profile",
                        "broken", "--port", str(port), "--data-dir", str(data), *flags)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    front = Front(proc, f"http://127.0.0.1:{port}", data)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        try:
            if httpx.get(f"{front.url}/health", timeout=2).status_code == 200:
                return front
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError("the front did not listen within 120 s")


@pytest.fixture(scope="module")
def stacked(tmp_path_factory: pytest.TempPathFactory, vllm_scratch: Path,
            tiny_model: Path) -> Iterator[Front]:
    front = _start_front(tmp_path_factory.mktemp("front-stack"), vllm_scratch, tiny_model,
                         "--idle-unload", "90")
    yield front
    if front.proc.poll() is None:
        front.stop()


def test_stacked_front_answers_each_model_and_a_broken_profile_is_json(stacked: Front) -> None:
    models = httpx.get(f"{stacked.url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["tiny-a", "tiny-b", "broken"]
    shares = stacked.status()["plan"]["shares"]
    assert {"tiny-a", "tiny-b"} <= set(shares)  # the plan's split: on the CPU backend they fit
    a = stacked.ask("tiny-a")
    assert a.status_code == 200 and a.json()["model"] == "tiny-a", a.text

    # B starts while A runs; two requests for B wait in the queue meanwhile and go through
    answers: list[httpx.Response | Exception] = []

    def ask_b() -> None:
        try:
            answers.append(stacked.ask("tiny-b"))
        except httpx.HTTPError as exc:  # reported by the assertion below
            answers.append(exc)

    first = threading.Thread(target=ask_b)
    first.start()
    time.sleep(3)
    status = stacked.status()
    assert status["queue"] >= 1
    assert {p["profile"]: p["state"] for p in status["profiles"]}["tiny-b"] == "starting"
    answers.append(stacked.ask("tiny-b"))
    first.join(ASK_TIMEOUT_S)
    assert all(isinstance(r, httpx.Response) for r in answers), answers
    replies = [r for r in answers if isinstance(r, httpx.Response)]
    assert [r.status_code for r in replies] == [200, 200]
    assert {r.json()["model"] for r in replies} == {"tiny-b"}
    assert stacked.states()["tiny-a"] == "loaded"  # both run: the plan fits them together
    assert stacked.states()["tiny-b"] == "loaded"
    swap = [s for s in stacked.status()["swaps"] if s["profile"] == "tiny-b"][-1]
    assert "stacked beside tiny-a" in swap["reason"] and swap["wait_s"] > 0

    # a profile that cannot start: a clear JSON error with vLLM's reason as kvpilot reads it
    broken = stacked.ask("broken")
    assert broken.status_code == 503
    error = broken.json()["error"]
    assert error["code"] == "max_model_len_above_model", error
    assert "profile 'broken' could not start" in error["message"] and "4,096" in error["message"]
    # the front stays up, and the next request to another profile is answered by the server
    # already loaded: no start, no swap (a wall-clock bound would measure the machine's load)
    swaps_before = stacked.status()["swaps"]
    again = stacked.ask("tiny-b")
    assert again.status_code == 200 and again.json()["model"] == "tiny-b"
    assert stacked.status()["swaps"] == swaps_before
    assert stacked.states()["tiny-b"] == "loaded"


def test_idle_profiles_unload_and_a_stopped_front_leaves_nothing(stacked: Front) -> None:
    deadline = time.monotonic() + 240
    while stacked.states()["tiny-a"] != "stopped" and time.monotonic() < deadline:
        time.sleep(2)
    assert stacked.states()["tiny-a"] == "stopped"  # idle for --idle-unload 90 s
    pids = stacked.stop()
    assert stacked.proc.returncode == 0
    assert not _alive(pids), "processes survived the front"
    assert not _alive(_session_pids(stacked))


def test_swapping_front_stops_a_before_b_answers(
    tmp_path: Path, vllm_scratch: Path, tiny_model: Path
) -> None:
    front = _start_front(tmp_path, vllm_scratch, tiny_model, "--max-loaded", "1")
    try:
        first = front.ask("tiny-a")
        assert first.status_code == 200 and first.json()["model"] == "tiny-a", first.text
        a_pids = _session_pids(front)
        assert a_pids
        b = front.ask("tiny-b")
        assert b.status_code == 200 and b.json()["model"] == "tiny-b"
        assert front.states() == {"tiny-a": "stopped", "tiny-b": "loaded", "broken": "stopped"}
        assert not _alive(a_pids), "A's server was stopped"
        swap = front.status()["swaps"][-1]
        assert swap["made_room"] == ["tiny-a"] and "stopped to make room" in swap["reason"]
        assert swap["load_s"] > 0 and swap["wait_s"] >= swap["load_s"]
        records = {r.profile: r for r in RunStore(front.data).records().records}
        assert records["tiny-b"].swaps[0]["made_room"] == ["tiny-a"]
        assert records["tiny-b"].swaps[0]["load_s"] > 0
        assert records["tiny-a"].state == "stopped"
    finally:
        pids = front.stop()
    assert front.proc.returncode == 0
    assert not _alive(pids), "processes survived the front"
