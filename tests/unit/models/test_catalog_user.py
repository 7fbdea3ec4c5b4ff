"""The user's refreshed catalog layered over the shipped one."""

from __future__ import annotations

from pathlib import Path

from kvpilot.core.models.catalog_user import layered, read_user_catalog


def test_user_entries_replace_shipped_ones_and_new_ones_follow() -> None:
    shipped = [{"id": "a/One", "v": 1}, {"id": "b/Two", "v": 1}]
    user = [{"id": "B/two", "v": 2}, {"id": "c/Three", "v": 2}]
    out = layered(shipped, user)
    assert [e["id"] for e in out] == ["a/One", "B/two", "c/Three"]
    assert out[1]["v"] == 2


def test_an_unreadable_user_catalog_is_ignored(tmp_path: Path) -> None:
    bad = tmp_path / "catalog_user.json"
    bad.write_text("{not json")
    assert read_user_catalog(bad) is None
    bad.write_text('{"entries": "nope"}')
    assert read_user_catalog(bad) is None
    assert read_user_catalog(tmp_path / "missing.json") is None
