"""The Hugging Face cache folder (read at call time) and the snapshots found in a fake cache."""

from __future__ import annotations

from kvpilot.core.hub.cache import cached_repo_ids, cached_snapshot, hub_cache_dir, is_repo_id

CONFIG = b'{"architectures": ["LlamaForCausalLM"]}'


def test_cache_dir_is_read_at_call_time(monkeypatch, tmp_path):
    from huggingface_hub import constants  # fixed now; the variables below come later

    assert constants.HF_HUB_CACHE
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == tmp_path / "a"  # HF_HUB_CACHE wins over HF_HOME
    monkeypatch.delenv("HF_HUB_CACHE")
    assert hub_cache_dir() == tmp_path / "home" / "hub"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_cache_dir() == tmp_path / "xdg" / "huggingface" / "hub"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    assert hub_cache_dir() == tmp_path / "me" / ".cache" / "huggingface" / "hub"


def test_cache_dir_argument_and_profile_home_come_first(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "env"))
    assert hub_cache_dir(tmp_path / "given") == tmp_path / "given"
    assert hub_cache_dir(hf_home=str(tmp_path / "profile")) == tmp_path / "profile" / "hub"
    assert hub_cache_dir(hf_home="") == tmp_path / "env"  # an empty setting: the default


def test_hf_home_is_honoured(hf_cache, monkeypatch):
    snap = hf_cache(
        "meta-llama/Llama-3.1-8B-Instruct", {"config.json": CONFIG}
    )
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(hf_cache.cache.parent))
    assert cached_snapshot("meta-llama/Llama-3.1-8B-Instruct") == snap
    assert cached_repo_ids() == ("meta-llama/Llama-3.1-8B-Instruct",)


def test_revision_lookup(hf_cache):
    snap = hf_cache("Qwen/Qwen3-8B", {"config.json": CONFIG}, revision="f" * 40)
    assert cached_snapshot("Qwen/Qwen3-8B", revision="f" * 40) == snap
    assert cached_snapshot("Qwen/Qwen3-8B", revision="e" * 40) is None


def test_is_repo_id():
    assert is_repo_id("Qwen/Qwen2.5-7B-Instruct")
    assert not is_repo_id("just-a-name")
    assert not is_repo_id("a/b/c")
    assert not is_repo_id("../x")


def test_empty_or_missing_cache_lists_no_repo(hf_cache, tmp_path):
    assert cached_repo_ids() == ()
    assert cached_repo_ids(tmp_path / "nowhere") == ()
    assert cached_snapshot("org/absent") is None
