"""The front end to end against the stand-in vLLM (tests/fakes/fake_vllm.py) on a planned RTX 4090:
real uvicorn, real supervisors and run records; the stand-in speaks vLLM's /sleep, /wake_up and
/is_sleeping (development endpoints, with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1), which
the CPU engine cannot (sleep mode is CUDA only).

One front per test; each profile's planned need is set so that the planner stacks or swaps."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from ports import free_port
from testpaths import DATA, TESTS

from kvpilot.core.app.front import profile_member
from kvpilot.core.app.launch import LaunchSession
from kvpilot.core.app.settings import Profile
from kvpilot.core.base.plan import ServingSettings
from kvpilot.core.base.units import GiB
from kvpilot.core.front.members import Member
from kvpilot.core.front.placement import ProfileNeed
from kvpilot.core.front.pool import FrontOptions, Pool
from kvpilot.core.front.proxy import MAX_BODY_BYTES
from kvpilot.core.front.server import FrontServer
from kvpilot.core.hardware.target import from_spec
from kvpilot.core.runs.store import RunStore
from kvpilot.core.runtimes.discovery import VllmRuntime

FAKE = TESTS / "fakes" / "fake_vllm.py"
KEY = "sk-front-unit-0123"


def _member(name: str, floor_gib: float, runtime: VllmRuntime) -> Member:
    card = from_spec("RTX 4090")
    assert card is not None
    profile = Profile(name=name, model_ref=f"/models/{name}", served_model_name=name,
                      plan=ServingSettings(max_model_len=1024, max_num_seqs=4))
    need = ProfileNeed(name, int(floor_gib * GiB), int(floor_gib * 1.5 * GiB), int(0.5 * GiB))
    return profile_member(profile, runtime, card, need=need)


@pytest.fixture
def front(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., FrontServer]]:
    monkeypatch.setenv("FAKE_VLLM_SLEEP_LOG", str(tmp_path / "sleep.log"))
    monkeypatch.setenv("FAKE_VLLM_LINE_DELAY_S", "0.002")
    made: list[FrontServer] = []

    def make(needs: dict[str, float], version: str = "0.33.0", **options: object) -> FrontServer:
        runtime = VllmRuntime((sys.executable, str(FAKE)), version, "env", str(FAKE))
        members = [_member(n, gib, runtime) for n, gib in needs.items()]

        def session(member: Member) -> LaunchSession:
            return LaunchSession(runtime, tmp_path / "data", run_profile=member.name,
                                 run_source="front",
                                 supervisor_options={"check_flags": False, "settle_s": 0.1,
                                                     "ready_timeout_s": 30.0})

        pool = Pool(members, tmp_path / "data", FrontOptions(**options),  # type: ignore[arg-type]
                    session_factory=session)
        server = FrontServer(pool, "127.0.0.1", free_port(19300), api_key=KEY)
        server.start()
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        made.append(server)
        return server

    yield make
    for server in made:
        assert server.stop(60)


def _ask(server: FrontServer, model: str, **body: object) -> httpx.Response:
    return httpx.post(f"{server.base_url}/v1/completions", timeout=60,
                      headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": model, "prompt": "hi", **body})


def _states(server: FrontServer) -> dict[str, str]:
    return {p["profile"]: p["state"] for p in server.status()["profiles"]}


def _sleep_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "sleep.log"
    return path.read_text().splitlines() if path.exists() else []


def _pids(server: FrontServer) -> set[int]:
    return {s.supervisor.pid for s in server.pool.slots.values()
            if s.supervisor is not None and s.supervisor.pid is not None}


def test_stacked_profiles_run_side_by_side_with_the_planned_shares(
    front: Callable[..., FrontServer], tmp_path: Path
) -> None:
    server = front({"a": 4, "b": 5})
    models = httpx.get(f"{server.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert [m["id"] for m in models.json()["data"]] == ["a", "b"]
    assert httpx.get(f"{server.base_url}/v1/models").status_code == 401  # the key holds
    assert _ask(server, "a").json()["choices"][0]["text"] == "from a"
    assert _ask(server, "b").json()["choices"][0]["text"] == "from b"
    assert _states(server) == {"a": "loaded", "b": "loaded"}  # stacked: the plan fits both
    status = server.status()
    swap = status["swaps"][-1]
    assert swap["profile"] == "b" and "stacked beside a" in swap["reason"]
    # each server got its share of the card as its utilization: floor 5 GiB, wants 7.5
    pool = server.pool
    for name, slot in pool.slots.items():
        assert slot.supervisor is not None and slot.supervisor.command is not None
        argv = list(slot.supervisor.command.argv)
        util = float(argv[argv.index("--gpu-memory-utilization") + 1])
        expected = slot.share_bytes / pool.total_bytes
        assert expected - 0.001 <= util <= expected, name
        assert slot.share_bytes == slot.member.need.want_bytes  # both fit with all they want
    pids = _pids(server)
    assert len(pids) == 2
    assert server.stop(60)
    assert not [p for p in pids if psutil.pid_exists(p)]


def test_swap_by_sleep_and_wake_on_the_next_request(
    front: Callable[..., FrontServer], tmp_path: Path
) -> None:
    server = front({"a": 12, "b": 12})
    assert not server.status()["plan"]["stack_all"]
    assert server.status()["sleep"]["allowed"]
    assert _ask(server, "a").json()["choices"][0]["text"] == "from a"
    assert _ask(server, "b").json()["choices"][0]["text"] == "from b"
    assert _states(server) == {"a": "asleep", "b": "loaded"}
    assert _sleep_log(tmp_path) == ["a sleep 1"]
    # the next request for a wakes it (b goes to sleep to make room) and is answered by a
    reply = _ask(server, "a", stream=True)
    assert reply.status_code == 200 and reply.headers["content-type"].startswith(
        "text/event-stream")
    chunks = [json.loads(line[6:]) for line in reply.text.splitlines()
              if line.startswith("data: {")]
    assert [c["choices"][0]["text"] for c in chunks] == ["from", "a"]
    assert reply.text.rstrip().endswith("data: [DONE]")
    assert _sleep_log(tmp_path) == ["a sleep 1", "b sleep 1", "a wake_up"]
    assert _states(server) == {"a": "loaded", "b": "asleep"}
    swaps = server.status()["swaps"]
    assert [(s["profile"], s["kind"]) for s in swaps] == [("a", "start"), ("b", "start"),
                                                          ("a", "wake")]
    assert "a put to sleep to make room" in swaps[1]["reason"] and swaps[1]["made_room"] == ["a"]
    # every swap is in its run's record: reason, wait and load time
    records = {r.profile: r for r in RunStore(tmp_path / "data").records().records}
    assert [s["kind"] for s in records["a"].swaps] == ["start", "wake"]
    assert records["b"].swaps[0]["made_room"] == ["a"]
    assert all(s["load_s"] >= 0 and s["wait_s"] >= s["load_s"] for s in records["a"].swaps)


def test_an_old_runtime_stops_instead_and_idle_profiles_unload(
    front: Callable[..., FrontServer], tmp_path: Path
) -> None:
    server = front({"a": 12, "b": 12}, version="0.9.2", idle_unload_s=1.5, idle_check_s=0.2)
    assert not server.status()["sleep"]["allowed"]
    assert _ask(server, "a").status_code == 200
    first = _pids(server)
    assert _ask(server, "b").json()["choices"][0]["text"] == "from b"
    assert _states(server)["a"] == "stopped" and not _sleep_log(tmp_path)
    assert not [p for p in first if psutil.pid_exists(p)], "a's server is gone"
    deadline = time.monotonic() + 15
    while _states(server)["b"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _states(server) == {"a": "stopped", "b": "stopped"}  # b unloaded when idle


def test_requests_during_a_start_wait_and_a_failed_profile_is_a_json_error(
    front: Callable[..., FrontServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_MODE", "fail")
    monkeypatch.setenv("FAKE_VLLM_LOG", str(DATA / "supervisor" / "cuda_oom_loading.log"))
    monkeypatch.setenv("FAKE_VLLM_FAIL_UNLESS", "--served-model-name good")
    monkeypatch.setenv("FAKE_VLLM_LINE_DELAY_S", "0.01")  # ~2 s to become ready
    server = front({"good": 4, "bad": 4})
    answers: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: answers.append(_ask(server, "good")))
               for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    assert server.status()["queue"] >= 1  # waiting while "good" starts
    for t in threads:
        t.join(60)
    assert [a.json()["choices"][0]["text"] for a in answers] == ["from good"] * 3
    assert len([s for s in server.status()["swaps"] if s["profile"] == "good"]) == 1
    failed = _ask(server, "bad")
    assert failed.status_code == 503
    error = failed.json()["error"]
    assert error["code"] == "cuda_oom_loading" and error["type"] == "server_error"
    assert "profile 'bad' could not start (cuda_oom_loading)" in error["message"]
    # the front stays up and the other profile still answers at once
    assert _ask(server, "good").json()["choices"][0]["text"] == "from good"
    unknown = _ask(server, "nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_bad_requests_get_openai_errors_without_starting_anything(
    front: Callable[..., FrontServer]
) -> None:
    server = front({"a": 4})
    auth = {"Authorization": f"Bearer {KEY}"}
    url = f"{server.base_url}/v1/chat/completions"
    cases = [
        (httpx.post(url, content=b"{not json", headers=auth), 400, "invalid_json"),
        (httpx.post(url, json={"messages": []}, headers=auth), 400, "model_required"),
        (httpx.post(url, json={"model": "a"}, headers={"Authorization": "Bearer wrong"}), 401,
         "invalid_api_key"),
        (httpx.get(f"{server.base_url}/v1/nothing", headers=auth), 404, "not_found"),
        (httpx.post(url, content=b"x" * (MAX_BODY_BYTES + 1), headers=auth), 413,
         "body_too_large"),
    ]
    for reply, status, code in cases:
        assert reply.status_code == status
        error = reply.json()["error"]
        assert error["code"] == code and error["message"] and set(error) == {
            "message", "type", "param", "code"}
    one = httpx.get(f"{server.base_url}/v1/models/a", headers=auth).json()
    assert one["id"] == "a" and one["kvpilot"] == {"profile": "a", "state": "stopped"}
    assert _states(server) == {"a": "stopped"} and not server.status()["swaps"]


def test_a_front_stopped_during_a_start_leaves_no_process(
    front: Callable[..., FrontServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_LINE_DELAY_S", "0.05")  # ~10 s to become ready
    server = front({"a": 4})
    answers: list[int] = []
    asker = threading.Thread(target=lambda: answers.append(_ask(server, "a").status_code))
    asker.start()
    deadline = time.monotonic() + 10
    while not _pids(server) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _pids(server)
    assert pids and _states(server)["a"] == "starting"
    assert server.stop(60)
    asker.join(30)
    # the request in the queue is not left hanging: uvicorn's graceful shutdown lets it finish
    # (served once its profile is up) before the pool stops every server
    assert answers in ([200], [503])
    time.sleep(0.2)
    assert not [p for p in pids if psutil.pid_exists(p)]
