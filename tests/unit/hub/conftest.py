"""Fixtures of the Hub tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.fake_hub import FakeHub, isolate_hf
from fakes.hub_catalog import add_catalog


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """The local Hub stand-in holding every catalog model, with kvpilot's cache in the test's
    folder."""
    monkeypatch.setenv("KVPILOT_CACHE_DIR", str(tmp_path / "kvpilot-cache"))
    with FakeHub(cdn=False) as fake:
        isolate_hf(monkeypatch, tmp_path, fake.endpoint)
        add_catalog(fake)
        yield fake
