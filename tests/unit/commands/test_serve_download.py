"""`kvpilot serve` downloads a Hub checkpoint itself before launching; later from the cache."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from fakes.fake_hub import FakeHub, isolate_hf

from kvpilot.core.commands.serve import EventPrinter, ensure_local_model
from kvpilot.core.hub.download_errors import GatedModelError
from kvpilot.core.vllm.command import LaunchSpec

REPO = "acme/tiny-serve"
FILES = {
    "config.json": b'{"architectures": ["LlamaForCausalLM"]}',
    "tokenizer.json": b'{"version": "1.0"}',
    "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(3 << 20),
}


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with FakeHub() as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        fake.add_repo(REPO, FILES)
        yield fake


def test_repo_id_is_downloaded_then_served_offline_from_the_snapshot(hub: FakeHub):
    stream = io.StringIO()
    spec = ensure_local_model(LaunchSpec(model=REPO), EventPrinter(stream, as_json=True))
    snapshot = Path(spec.model)
    assert snapshot.is_dir()
    assert (snapshot / "model.safetensors").read_bytes() == FILES["model.safetensors"]
    assert spec.hf_offline is True
    assert spec.served_model_name == REPO
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    progress = [e for e in events if e["event"] == "download"]
    assert progress[0]["state"] == "checking"
    assert progress[-1]["bytes_total"] == sum(len(b) for b in FILES.values())
    assert progress[-1]["state"] == "done"
    assert progress[-1]["bytes_done"] == progress[-1]["bytes_total"]

    # the second launch finds the snapshot in the cache: nothing is fetched again
    before = sum(r.body_bytes_sent for r in hub.settled())
    again = io.StringIO()
    spec2 = ensure_local_model(LaunchSpec(model=REPO), EventPrinter(again, as_json=True))
    assert spec2.model == spec.model
    assert again.getvalue() == ""
    after = sum(r.body_bytes_sent for r in hub.settled())
    assert after == before


def test_local_folders_are_served_offline_as_they_are(tmp_path: Path):
    """Nothing of a local folder is on the Hub: vLLM is told so (``HF_HUB_OFFLINE=1``), from
    the command line and the window alike; nothing is downloaded or printed."""
    stream = io.StringIO()
    spec = LaunchSpec(model=str(tmp_path))
    assert ensure_local_model(spec, EventPrinter(stream, as_json=False)) == replace(
        spec, hf_offline=True)
    assert stream.getvalue() == ""
    unknown = LaunchSpec(model="not a repo id, not a folder")
    assert ensure_local_model(unknown, EventPrinter(stream, as_json=False)) is unknown


def test_gated_repo_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with FakeHub() as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        fake.add_repo(REPO, FILES, gated=True)
        with pytest.raises(GatedModelError, match=r"licen[cs]e"):
            ensure_local_model(LaunchSpec(model=REPO), EventPrinter(io.StringIO(), as_json=True))
