"""Model download against a local stand-in for the Hugging Face Hub (tests/fakes/fake_hub.py)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from huggingface_hub import hf_hub_download

from kvpilot.core.hub import download as dl
from kvpilot.core.hub import download_errors as errs
from kvpilot.core.hub.cache import complete_snapshot
from kvpilot.core.hub.download import (
    Downloader,
    DownloadProgress,
    check_disk_space,
    plan_download,
)
from kvpilot.core.hub.download_errors import (
    DiskFullError,
    DownloadCancelled,
    DownloadInterruptedError,
    GatedModelError,
    HubAuthError,
    HubUnreachableError,
    ModelNotFoundError,
    NotEnoughDiskError,
)

REPO = "acme/tiny-chat"
WEIGHTS = "model.safetensors"
WEIGHT_FLOATS = 1_310_720  # 5 MiB of float32


def safetensors_bytes(n_floats: int, seed: int = 7) -> bytes:
    """A valid one-tensor safetensors file with pseudo-random float32 data."""
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [n_floats], "data_offsets": [0, 4 * n_floats]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    data = b"".join(
        hashlib.sha256(struct.pack("<II", seed, i)).digest() for i in range(n_floats * 4 // 32)
    )
    return struct.pack("<Q", len(header)) + header + data


def repo_files() -> dict[str, bytes]:
    return {
        "config.json": json.dumps(
            {"architectures": ["LlamaForCausalLM"], "hidden_size": 64}
        ).encode(),
        "generation_config.json": b'{"temperature": 0.7}',
        "tokenizer.json": json.dumps(
            {"model": {"vocab": {str(i): i for i in range(2000)}}}
        ).encode(),
        "tokenizer_config.json": b'{"chat_template": "{{ messages }}"}',
        WEIGHTS: safetensors_bytes(WEIGHT_FLOATS),
        "pytorch_model.bin": b"\x80\x02pickle" * 1000,
        "original/consolidated.00.pth": b"pth" * 1000,
        "model.gguf": b"GGUF" * 100,
        "README.md": b"# tiny chat",
        ".gitattributes": b"*.safetensors filter=lfs",
    }


NEEDED = [
    "config.json",
    "generation_config.json",
    WEIGHTS,
    "tokenizer.json",
    "tokenizer_config.json",
]


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    with FakeHub(valid_tokens={"hf_good", "hf_licensed"}) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        fake.add_repo(REPO, repo_files())
        yield fake


class Events:
    """Collects progress events; optionally sets a cancel event once a condition holds."""

    def __init__(self, cancel: threading.Event | None = None, cancel_after_bytes: int = -1) -> None:
        self.items: list[DownloadProgress] = []
        self._cancel = cancel
        self._cancel_after = cancel_after_bytes

    def __call__(self, event: DownloadProgress) -> None:
        self.items.append(event)
        if self._cancel is not None and 0 <= self._cancel_after < event.bytes_fetched:
            self._cancel.set()

    @property
    def states(self) -> list[str]:
        return [e.state for e in self.items]


def size_of(name: str) -> int:
    return len(repo_files()[name])


# -- file selection ---------------------------------------------------------------------------
def test_select_files_keeps_what_vllm_loads() -> None:
    needed, skipped = dl.select_files(repo_files())
    assert needed == NEEDED
    assert set(skipped) == set(repo_files()) - set(NEEDED)


def test_select_files_sharded_safetensors_and_mistral_duplicates() -> None:
    names = [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "consolidated.safetensors",
        "params.json",
        "pytorch_model.bin.index.json",
        "tokenizer.model",
        "merges.txt",
        "modeling_custom.py",
        "chat_template.jinja",
        "original/params.json",
    ]
    needed, skipped = dl.select_files(names)
    assert "consolidated.safetensors" in skipped
    assert "pytorch_model.bin.index.json" in skipped
    assert "original/params.json" in skipped
    assert needed == sorted(
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "params.json",
            "tokenizer.model",
            "merges.txt",
            "modeling_custom.py",
            "chat_template.jinja",
        ]
    )


def test_select_files_falls_back_to_bin_only_without_safetensors() -> None:
    needed, _ = dl.select_files(
        ["config.json", "pytorch_model.bin", "training_args.bin", "pytorch_model.bin.index.json"]
    )
    assert needed == ["config.json", "pytorch_model.bin", "pytorch_model.bin.index.json"]


def test_select_files_gguf_only_repo_is_a_typed_error() -> None:
    with pytest.raises(errs.NoLoadableWeightsError, match="safetensors"):
        dl.select_files(["README.md", "model-Q4_K_M.gguf", "original/consolidated.00.pth"])


# -- planning ---------------------------------------------------------------------------------
def test_plan_lists_real_sizes_and_what_to_fetch(hub: FakeHub) -> None:
    plan = plan_download(REPO)
    assert [f.filename for f in plan.files] == NEEDED
    assert {f.filename: f.size_bytes for f in plan.files} == {n: size_of(n) for n in NEEDED}
    assert plan.total_bytes == sum(size_of(n) for n in NEEDED)
    assert plan.bytes_to_fetch == plan.total_bytes
    assert plan.commit_sha == hub.repos[REPO].sha
    assert plan.endpoint == hub.endpoint  # HF_ENDPOINT read at call time
    weights = next(f for f in plan.files if f.filename == WEIGHTS)
    assert weights.etag == hashlib.sha256(repo_files()[WEIGHTS]).hexdigest()
    assert "pytorch_model.bin" in plan.skipped_files
    assert "hf_" not in repr(plan)  # no token in reprs


def test_plan_allow_patterns_replace_the_default_selection(hub: FakeHub) -> None:
    plan = plan_download(REPO, allow_patterns=["*.json"])
    assert WEIGHTS not in [f.filename for f in plan.files]
    assert "config.json" in [f.filename for f in plan.files]
    with pytest.raises(ModelNotFoundError, match=r"\*\.xyz"):
        plan_download(REPO, allow_patterns=["*.xyz"])


# -- full download ----------------------------------------------------------------------------
def test_full_download_progress_adds_up_and_snapshot_is_complete(hub: FakeHub) -> None:
    plan = plan_download(REPO)
    events = Events()
    downloader = Downloader(plan, events, threading.Event(), min_interval_s=0.0)
    downloader.start()
    snapshot = downloader.wait(timeout_s=60)

    assert snapshot == plan.snapshot_path
    for name in NEEDED:
        assert (snapshot / name).read_bytes() == repo_files()[name]
    assert not (snapshot / "pytorch_model.bin").exists()
    assert (plan.repo_dir / "refs" / "main").read_text() == plan.commit_sha
    assert complete_snapshot(REPO) == snapshot

    assert events.states[0] == "checking"
    assert events.states[-1] == "done"
    assert set(events.states[1:-1]) == {"downloading"}
    done = [e.bytes_done for e in events.items]
    assert done == sorted(done)  # never goes backwards
    last = events.items[-1]
    assert last.bytes_done == last.bytes_total == plan.total_bytes
    assert last.bytes_fetched == plan.total_bytes
    assert last.files_done == last.files_total == len(NEEDED)
    assert last.eta_s == 0.0 and last.snapshot_path == snapshot
    assert any(e.current_file == WEIGHTS for e in events.items)
    assert any(e.speed_bytes_per_s > 0 and e.eta_s is not None for e in events.items)

    # the weights came from the "CDN" without the Hub token, exactly once, in one piece
    (weights_get,) = hub.downloads_of(hashlib.sha256(repo_files()[WEIGHTS]).hexdigest())
    assert weights_get.server == "cdn" and weights_get.range_header is None
    assert weights_get.body_bytes_sent == size_of(WEIGHTS)
    sent = sum(r.body_bytes_sent for r in hub.settled() if r.method == "GET" and r.status < 300)
    info_bytes = sum(r.body_bytes_sent for r in hub.settled() if r.path.startswith("/api/"))
    assert sent - info_bytes == plan.total_bytes

    # a second plan finds everything cached, and a second run sends nothing
    again = plan_download(REPO)
    assert again.complete and again.bytes_to_fetch == 0
    before = len(hub.downloads_of(""))
    assert Downloader(again, Events()).run() == snapshot
    assert len(hub.downloads_of("")) == before


def test_snapshot_is_usable_offline_by_huggingface_hub(hub: FakeHub) -> None:
    plan = plan_download(REPO)
    Downloader(plan, Events()).run()
    hub.stop()
    path = hf_hub_download(REPO, "config.json", local_files_only=True)
    assert Path(path).parent == plan.snapshot_path
    offline = plan_download(REPO)  # Hub unreachable now: the cache stands in
    assert offline.offline and offline.complete and offline.commit_sha == plan.commit_sha
    assert Downloader(offline, Events()).run() == plan.snapshot_path


# -- interruption and resume ------------------------------------------------------------------
def _partial(plan: dl.DownloadPlan) -> Path:
    return (
        plan.repo_dir
        / "blobs"
        / (hashlib.sha256(repo_files()[WEIGHTS]).hexdigest() + ".incomplete")
    )


def test_dropped_connection_keeps_partial_and_next_run_resumes_with_range(hub: FakeHub) -> None:
    cut = 2 * 1024 * 1024 + 123
    hub.drop_after[WEIGHTS] = cut
    plan = plan_download(REPO)
    events = Events()
    with pytest.raises(DownloadInterruptedError, match="resume"):
        Downloader(plan, events, max_retries=0).run()
    assert events.items[-1].state == "failed"
    assert events.items[-1].error_kind == errs.KIND_INTERRUPTED
    assert _partial(plan).stat().st_size == cut
    assert complete_snapshot(REPO) is None

    second = plan_download(REPO)
    weights = next(f for f in second.files if f.filename == WEIGHTS)
    assert weights.partial_bytes == cut
    assert second.partial_bytes == cut
    assert second.bytes_to_fetch == size_of(WEIGHTS) - cut  # weights come last: only their tail
    events2 = Events()
    snapshot = Downloader(second, events2).run()

    first_get, resumed_get = hub.downloads_of(weights.etag)
    assert first_get.body_bytes_sent == cut
    assert resumed_get.range_header == f"bytes={cut}-" and resumed_get.status == 206
    assert resumed_get.body_bytes_sent == size_of(WEIGHTS) - cut  # nothing re-sent
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]
    assert events2.items[0].bytes_done == second.cached_bytes + cut
    assert events2.items[-1].bytes_fetched == size_of(WEIGHTS) - cut
    assert not _partial(plan).exists()


def test_dropped_connection_is_resumed_within_the_same_run(hub: FakeHub) -> None:
    hub.drop_after[WEIGHTS] = 1_000_000
    plan = plan_download(REPO)
    snapshot = Downloader(plan, Events(), retry_delay_s=0.01).run()
    first, resumed = hub.downloads_of(hashlib.sha256(repo_files()[WEIGHTS]).hexdigest())
    assert resumed.range_header == "bytes=1000000-"
    assert first.body_bytes_sent + resumed.body_bytes_sent == size_of(WEIGHTS)
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]


def test_server_ignoring_range_restarts_the_file_cleanly(hub: FakeHub) -> None:
    hub.drop_after[WEIGHTS] = 700_000
    plan = plan_download(REPO)
    with pytest.raises(DownloadInterruptedError):
        Downloader(plan, Events(), max_retries=0).run()
    hub.ignore_range = True
    events = Events()
    snapshot = Downloader(plan_download(REPO), events, min_interval_s=0.0).run()
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]
    assert events.items[-1].bytes_done == plan.total_bytes


# -- cancel -----------------------------------------------------------------------------------
def test_cancel_mid_file_keeps_partial_and_resumes(hub: FakeHub) -> None:
    hub.chunk_delay_s = 0.002  # a slow link, so the cancel lands mid-file
    cancel = threading.Event()
    plan = plan_download(REPO)
    events = Events(cancel, cancel_after_bytes=1_500_000)
    downloader = Downloader(plan, events, cancel, min_interval_s=0.0)
    downloader.start()
    with pytest.raises(DownloadCancelled, match="resumes"):
        downloader.wait(timeout_s=60)
    assert events.items[-1].state == "cancelled"
    assert events.items[-1].current_file == WEIGHTS
    kept = _partial(plan).stat().st_size
    assert 1_400_000 < kept < size_of(WEIGHTS)

    hub.chunk_delay_s = 0.0
    snapshot = Downloader(plan_download(REPO), Events()).run()
    resumed = hub.downloads_of(hashlib.sha256(repo_files()[WEIGHTS]).hexdigest())[-1]
    assert resumed.range_header == f"bytes={kept}-"
    assert resumed.body_bytes_sent == size_of(WEIGHTS) - kept
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]


def test_cancel_before_start_fetches_nothing(hub: FakeHub) -> None:
    cancel = threading.Event()
    cancel.set()
    events = Events()
    with pytest.raises(DownloadCancelled):
        Downloader(plan_download(REPO), events, cancel).run()
    assert events.states == ["checking", "cancelled"]
    assert not [r for r in hub.settled() if r.method == "GET" and "/resolve/" in r.path]


# -- access errors ----------------------------------------------------------------------------
def test_gated_repo_says_accept_licence_and_set_token(hub: FakeHub) -> None:
    gated = hub.add_repo("acme/gated-chat", repo_files(), gated=True)
    with pytest.raises(GatedModelError) as err:
        plan_download("acme/gated-chat")
    message = str(err.value)
    assert f"{hub.endpoint}/acme/gated-chat" in message
    assert "licence" in message and "token" in message and "HF_TOKEN" in message
    assert err.value.kind == "gated_repo"
    with pytest.raises(GatedModelError):
        plan_download("acme/gated-chat", token="hf_good")  # valid token, licence not accepted

    gated.allowed_tokens.add("hf_licensed")
    plan = plan_download("acme/gated-chat", token="hf_licensed")
    assert plan.gated
    snapshot = Downloader(plan, Events()).run()
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]
    hub_gets = [r for r in hub.settled() if r.method == "GET" and "/resolve/" in r.path]
    assert hub_gets and all(r.authorization == "Bearer hf_licensed" for r in hub_gets)
    assert all(r.authorization is None for r in hub.settled() if r.server == "cdn")


def test_token_from_hf_token_environment_is_used(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add_repo("acme/gated-chat", repo_files(), gated=True).allowed_tokens.add("hf_licensed")
    monkeypatch.setenv("HF_TOKEN", "hf_licensed")
    plan = plan_download("acme/gated-chat")
    assert plan.token is None
    Downloader(plan, Events()).run()


def test_repo_not_found(hub: FakeHub) -> None:
    with pytest.raises(ModelNotFoundError, match="acme/no-such-model was not found") as err:
        plan_download("acme/no-such-model")
    assert err.value.kind == "model_not_found"


def test_revision_not_found(hub: FakeHub) -> None:
    with pytest.raises(ModelNotFoundError, match="no revision 'v9'"):
        plan_download(REPO, revision="v9")


def test_rejected_token_is_an_auth_error(hub: FakeHub) -> None:
    with pytest.raises(HubAuthError, match="token was rejected"):
        plan_download(REPO, token="hf_revoked")


def test_unreachable_hub_and_model_not_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeHub() as closed:
        endpoint = closed.endpoint
    isolate_hf(monkeypatch, tmp_path, endpoint)
    with pytest.raises(HubUnreachableError, match="not completely in the Hugging Face cache"):
        plan_download(REPO)


def test_offline_mode_uses_the_cache_or_says_it_is_missing(
    hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(HubUnreachableError, match="HF_HUB_OFFLINE"):
        plan_download(REPO)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    Downloader(plan_download(REPO), Events()).run()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert plan_download(REPO).offline


# -- disk -------------------------------------------------------------------------------------
class TinyDisk:
    def __init__(self, free: int) -> None:
        self.free = free
        self.asked: list[str] = []

    def __call__(self, path: str) -> TinyDisk:
        self.asked.append(path)
        return self


def test_not_enough_disk_fails_before_any_byte(hub: FakeHub) -> None:
    plan = plan_download(REPO)
    disk = TinyDisk(free=1_000_000)
    events = Events()
    with pytest.raises(NotEnoughDiskError) as err:
        Downloader(plan, events, disk_usage=disk).run()
    assert err.value.needed_bytes == plan.bytes_to_fetch
    assert err.value.free_bytes == 1_000_000
    assert "5.3 MB" in str(err.value) and "1.0 MB" in str(err.value)
    assert "HF_HUB_CACHE" in str(err.value)
    assert Path(disk.asked[0]).exists()  # nearest existing parent of the cache folder
    assert events.states == ["checking", "failed"]
    assert events.items[-1].error_kind == errs.KIND_NO_DISK_SPACE
    assert not [r for r in hub.settled() if r.method == "GET" and "/resolve/" in r.path]
    assert check_disk_space(plan, disk_usage=TinyDisk(free=plan.bytes_to_fetch)) == (
        plan.bytes_to_fetch
    )


class FillingFile:
    """A file that hits ENOSPC once ``budget`` bytes have been written to it."""

    def __init__(self, path: Path, budget: int) -> None:
        self._fh = path.open("ab")
        self._budget = budget

    def write(self, data: bytes) -> int:
        if len(data) > self._budget:
            self._fh.write(data[: self._budget])
            self._budget = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget -= len(data)
        return self._fh.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def test_disk_full_during_download(hub: FakeHub) -> None:
    def opener(path: Path) -> BinaryIO:
        budget = (
            3_000_000
            if path.name.startswith(hashlib.sha256(repo_files()[WEIGHTS]).hexdigest())
            else 10**9
        )
        return FillingFile(path, budget)  # type: ignore[return-value]

    plan = plan_download(REPO)
    events = Events()
    with pytest.raises(DiskFullError, match="is full") as err:
        Downloader(plan, events, open_file=opener).run()
    assert err.value.kind == errs.KIND_DISK_FULL
    assert err.value.needed_bytes == plan.total_bytes - 3_000_000 - sum(
        size_of(f.filename) for f in plan.files if f.filename != WEIGHTS
    )
    assert err.value.partial_path == _partial(plan)
    assert f"kept in {_partial(plan)}" in str(err.value)
    assert events.items[-1].state == "failed"
    assert _partial(plan).stat().st_size == 3_000_000  # what was written stays for the resume


# -- smoothing --------------------------------------------------------------------------------
def test_speed_meter_smooths_bursts() -> None:
    meter = dl.SpeedMeter(tau_s=3.0)
    meter.update(0.0, 0)
    assert meter.update(1.0, 10_000_000) == pytest.approx(10e6)
    burst = meter.update(1.1, 20_000_000)  # 100 MB/s for 0.1 s
    assert 10e6 < burst < 14e6
    steady = 0.0
    for i in range(1, 40):
        steady = meter.update(1.1 + i, 20_000_000 + i * 10_000_000)
    assert steady == pytest.approx(10e6, rel=0.01)


# -- hub lost, one-call helper ----------------------------------------------------------------
def test_hub_lost_after_planning_says_model_cannot_start_offline(hub: FakeHub) -> None:
    plan = plan_download(REPO)
    hub.stop()
    events = Events()
    with pytest.raises(HubUnreachableError, match="not completely in the cache"):
        Downloader(plan, events).run()
    assert events.items[-1].error_kind == errs.KIND_UNREACHABLE


def test_ensure_downloaded_fetches_once_then_uses_the_cache(hub: FakeHub) -> None:
    events = Events()
    snapshot = dl.ensure_downloaded(REPO, on_progress=events)
    assert events.states[-1] == "done"
    assert (snapshot / WEIGHTS).read_bytes() == repo_files()[WEIGHTS]
    seen = len(hub.settled())
    assert dl.ensure_downloaded(REPO) == snapshot
    assert len(hub.settled()) == seen  # no request at all the second time


def test_retries_give_up_when_no_byte_arrives_any_more(hub: FakeHub) -> None:
    hub.chunk_delay_s = 0.002
    plan = plan_download(REPO)
    stopper = threading.Thread(target=hub.stop)

    def stop_hub_mid_file(event: DownloadProgress) -> None:
        if event.current_file == WEIGHTS and event.bytes_fetched > 1_000_000 and not stopper.ident:
            stopper.start()

    with pytest.raises(DownloadInterruptedError, match="kept") as err:
        Downloader(plan, stop_hub_mid_file, max_retries=2, retry_delay_s=0.01).run()
    stopper.join(timeout=10)
    assert "of 5.2 MB kept" in str(err.value)
    assert _partial(plan).stat().st_size > 1_000_000 - 30_000  # the bytes that arrived stay
