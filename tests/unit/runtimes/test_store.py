"""Runtimes on disk: listing, default, pins by profiles, hand-placed folders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kvpilot.core.app.settings import Profile
from kvpilot.core.base.errors import RuntimeInstallError
from kvpilot.core.runtimes import store


def _verified(folder: Path, version: str, variant: str) -> None:
    store.write_manifest(folder, {"version": version, "variant": variant,
                                  "vllm_version": version, "size_bytes": 10})


def test_listing_default_first_then_newest(
    home: Path, make_venv_like: Callable[[Path], Path]
) -> None:
    root = home / "data" / "runtimes"
    for rid in ("0.30.0-cpu", "0.32.0-cpu", "0.31.0-cuda"):
        folder = make_venv_like(root / rid)
        version, variant = store.parse_runtime_id(rid)  # type: ignore[misc]
        _verified(folder, version, variant)
    make_venv_like(root / "by-hand")
    (root / "logs").mkdir()
    (root / "not-a-runtime").mkdir()
    store.set_default("0.30.0-cpu")
    ids = [rt.runtime_id for rt in store.list_installed()]
    assert ids == ["0.30.0-cpu", "0.32.0-cpu", "0.31.0-cuda", "by-hand"]
    exes = store.managed_executables()
    assert exes == [root / r / "bin" / "vllm" for r in ids]  # hand-placed last
    hand = store.get_installed("by-hand")
    assert hand is not None and not hand.verified and "not installed and verified" in str(
        hand.problem
    )
    with pytest.raises(RuntimeInstallError, match="cannot be the default"):
        store.set_default("by-hand")


def test_resolve_by_version_and_ambiguity(
    home: Path, make_venv_like: Callable[[Path], Path]
) -> None:
    root = home / "data" / "runtimes"
    for rid in ("0.32.0-cpu", "0.32.0-cuda", "0.31.0-cpu"):
        version, variant = store.parse_runtime_id(rid)  # type: ignore[misc]
        _verified(make_venv_like(root / rid), version, variant)
    assert store.resolve_id("0.31.0").runtime_id == "0.31.0-cpu"
    with pytest.raises(RuntimeInstallError, match=r"several runtimes have version 0\.32\.0"):
        store.resolve_id("0.32.0")
    assert store.resolve_id("0.32.0-cuda").variant == "cuda"


def test_profiles_that_pin_a_runtime(home: Path, make_venv_like: Callable[[Path], Path]) -> None:
    folder = make_venv_like(home / "data" / "runtimes" / "0.32.0-cpu")
    _verified(folder, "0.32.0", "cpu")
    rt = store.get_installed("0.32.0-cpu")
    assert rt is not None
    profiles = [
        Profile(name="by-id", vllm_runtime="0.32.0-cpu"),
        Profile(name="by-folder", vllm_runtime=str(folder)),
        Profile(name="by-exe", vllm_runtime=str(folder / "bin" / "vllm")),
        Profile(name="auto", vllm_runtime=""),
        Profile(name="elsewhere", vllm_runtime="/usr/bin/vllm"),
        Profile(name="sibling", vllm_runtime=str(folder) + "-old/bin/vllm"),
    ]
    assert store.profiles_using(profiles, rt) == ["by-id", "by-folder", "by-exe"]
    with pytest.raises(RuntimeInstallError, match="pinned by profile"):
        store.remove_runtime("0.32.0-cpu", used_by=["by-id"])
    assert folder.is_dir()
