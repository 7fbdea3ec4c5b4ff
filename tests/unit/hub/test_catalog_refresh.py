"""``kvpilot catalog refresh`` against the local Hub stand-in, and offline."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from fakes.hub_catalog import add_entry

from kvpilot.core.hub.catalog_refresh import refresh_catalog
from kvpilot.core.models import catalog
from kvpilot.core.models.catalog import find, forget_loaded_catalog, shipped_catalog_date

NEW = "example/Newmodel-8B-Instruct"
NEW_AWQ = "example/Newmodel-8B-Instruct-AWQ"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "cache"))
    with FakeHub(cdn=False) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        found = find("Qwen/Qwen3-8B")
        assert found is not None
        add_entry(fake, found[0], 0)
        # a model the shipped catalog lacks, and its quantized upload, with the Qwen3-8B files
        base = fake.repos["Qwen/Qwen3-8B"]
        new = fake.add_repo(NEW, dict(base.files))
        new.pipeline_tag, new.downloads, new.trending_score = "text-generation", 2_000_000, 900
        new.created_at = "2026-11-20T10:00:00.000Z"
        new.safetensors_parameters = {"BF16": 8_190_735_360}
        awq = fake.add_repo(NEW_AWQ, dict(fake.repos["Qwen/Qwen3-8B-AWQ"].files))
        awq.pipeline_tag, awq.downloads = "text-generation", 500_000
        awq.tags = (f"base_model:quantized:{NEW}",)
        awq.safetensors_parameters = {"I32": 1_000_000_000, "F16": 1_300_000_000}
        yield fake
    forget_loaded_catalog()


def test_refresh_adds_a_new_model_with_its_quantized_upload_size_and_date(
    hub: FakeHub, tmp_path: Path
) -> None:
    result = refresh_catalog(limit=10)
    assert result.online and NEW in result.added
    assert "Qwen/Qwen3-8B" in result.built and "Qwen/Qwen3-8B" not in result.added
    assert NEW_AWQ not in result.built  # reached through its base's model tree
    saved = json.loads((tmp_path / "data" / "catalog_user.json").read_text())
    assert saved["refreshed_at"] == result.catalog_date
    entry = next(e for e in saved["entries"] if e["id"] == NEW)
    assert entry["release_date"] == "2026-11-20"
    by_repo = {c["repo"]: c for c in entry["checkpoints"]}
    assert set(by_repo) == {NEW, NEW_AWQ}
    assert by_repo[NEW]["weights_bytes"] == 2 * 8_190_735_360
    assert by_repo[NEW_AWQ]["method"] == "awq" and by_repo[NEW_AWQ]["weights_source"] == "catalog"
    # layered over the shipped catalog: the planner finds the new checkpoints
    forget_loaded_catalog()
    found = find(NEW_AWQ)
    assert found is not None and found[0].id == NEW
    assert catalog.catalog_date() == result.catalog_date
    assert len(catalog.catalog_entries()) == len(catalog.shipped_entries()) + 1


def test_offline_the_shipped_catalog_stays_with_its_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    isolate_hf(monkeypatch, tmp_path, f"http://127.0.0.1:{port}")
    result = refresh_catalog(limit=5)
    assert not result.online and result.built == ()
    assert f"the shipped catalog of {shipped_catalog_date()} stays in use" in result.message
    assert not (tmp_path / "data" / "catalog_user.json").exists()


def test_the_cli_says_the_catalog_date_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from kvpilot.core import cli

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no vLLM runtime: no architecture filter
    isolate_hf(monkeypatch, tmp_path, f"http://127.0.0.1:{port}")
    assert cli.main(["catalog", "refresh", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["online"] is False and out["catalog_date"] == shipped_catalog_date()
