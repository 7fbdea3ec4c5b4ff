"""One identity per model: catalog id, Hub id and snapshot folder agree."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kvpilot.core.hub.identity import model_identity, spec_identity
from kvpilot.core.models.catalog import get


def test_a_snapshot_folder_is_its_repo_id(tmp_path: Path) -> None:
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    assert model_identity(str(snap)) == "Qwen/Qwen3-8B"
    assert model_identity(str(snap) + "/") == "Qwen/Qwen3-8B"
    assert model_identity("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"


def test_a_folder_of_ones_own_is_its_absolute_path(tmp_path: Path, monkeypatch) -> None:
    own = tmp_path / "my model"
    own.mkdir()
    monkeypatch.chdir(tmp_path)
    assert model_identity("my model") == str(own.resolve())
    assert model_identity(str(own)) == str(own.resolve())


def test_a_catalog_spec_and_a_cached_spec_share_the_identity(tmp_path: Path) -> None:
    spec = get("Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert spec_identity(spec) == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    snap = tmp_path / "models--Qwen--Qwen2.5-7B-Instruct-AWQ" / "snapshots" / "r1"
    cached = replace(spec, model_id=str(snap), source=str(snap))
    assert spec_identity(cached) == "Qwen/Qwen2.5-7B-Instruct-AWQ"
    hub = replace(spec, model_id="x", source="hub-cache:Qwen/Qwen2.5-7B-Instruct-AWQ@r1")
    assert spec_identity(hub) == "Qwen/Qwen2.5-7B-Instruct-AWQ"


def test_launch_reference_is_the_cached_snapshot_folder(tmp_path: Path, monkeypatch) -> None:
    from kvpilot.core.hub.identity import launch_reference

    repo = tmp_path / "hub" / "models--org--tiny"
    snap = repo / "snapshots" / "0123abcd"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = replace(get("Qwen/Qwen2.5-7B-Instruct-AWQ"), model_id="org/tiny",
                   source="hub-cache:org/tiny@0123abcd")
    assert launch_reference(spec) == str(snap)
    own = tmp_path / "mine"
    own.mkdir()
    assert launch_reference(replace(spec, source=str(own))) == str(own)
    catalog = get("Qwen/Qwen2.5-7B-Instruct-AWQ")
    assert launch_reference(catalog) == "Qwen/Qwen2.5-7B-Instruct-AWQ"
