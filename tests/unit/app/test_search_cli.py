"""``kvpilot search`` against the local Hub stand-in."""

from __future__ import annotations

import json

from fakes.fake_hub import FakeHub

from kvpilot.core.cli import main

ARGS = ["--gpu", "RTX 4090", "--no-runtime-filter", "--vllm-version", "0.11.0"]


def test_text_output_names_badges_sizes_and_the_plan_command(hub: FakeHub, capsys):
    assert main(["search", "Qwen3-14B", *ARGS]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-14B" in out and "[fits]" in out
    assert "awq" in out and "GiB" in out
    assert "plan: kvpilot plan Qwen/Qwen3-14B" in out


def test_json_then_offline_from_cache(hub: FakeHub, capsys):
    assert main(["search", "gemma-3", *ARGS, "--json", "--context", "32768"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["from_cache"] is False and data["goal"]["context"] == 32768
    hit = data["hits"][0]
    assert set(hit["badge"]) >= {"verdict", "reason", "checkpoint", "max_model_len"}
    assert hit["pipeline_tag"] == "image-text-to-text"
    hub.stop()
    assert main(["search", "gemma-3", *ARGS, "--json", "--offline", "--context", "32768"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["from_cache"] is True and again["hits"] == data["hits"]


def test_bad_numbers_and_offline_without_cache_are_one_line_errors(hub: FakeHub, capsys):
    assert main(["search", "x", *ARGS, "--users", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
    assert main(["search", "never-searched", *ARGS, "--offline"]) == 2
    assert "offline mode" in capsys.readouterr().err


def test_fp8_checkpoints_below_ada_are_marked_weight_only(hub: FakeHub, capsys):
    assert main(["search", "Qwen3-8B", "--gpu", "RTX 3090", "--no-runtime-filter",
                 "--vllm-version", "0.11.0"]) == 0
    assert "fp8 8.8 GiB (weight-only here)" in capsys.readouterr().out
    assert main(["search", "Qwen3-8B", *ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(c["note"] is None for c in data["hits"][0]["checkpoints"])


HIT_KEYS = ["repo", "sha", "pipeline_tag", "architecture", "downloads", "trending_score",
            "created_at", "gated", "badge", "checkpoints"]
BADGE_KEYS = ["verdict", "reason", "checkpoint", "max_model_len", "max_num_seqs",
              "kv_cache_dtype", "gpu_memory_utilization", "decode_tokens_per_s"]
CHECKPOINT_KEYS = ["repo", "scheme", "weights_bytes", "weights_source", "refused", "note"]


def test_json_keys_order_and_listing_values_are_pinned(hub: FakeHub, capsys):
    assert main(["search", "Qwen3", *ARGS, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["query", "sort", "gpu", "goal", "from_cache", "fetched_at_s",
                          "runtime_note", "stale_note", "hits", "unregistered"]
    assert len(data["hits"]) > 1
    for hit in data["hits"]:
        assert list(hit) == HIT_KEYS
        assert list(hit["badge"]) == BADGE_KEYS
        assert hit["checkpoints"] and all(list(c) == CHECKPOINT_KEYS for c in hit["checkpoints"])
        listed = hub.repos[hit["repo"]]
        config = json.loads(listed.files["config.json"])
        assert {k: hit[k] for k in HIT_KEYS[1:8]} == {
            "sha": listed.sha, "pipeline_tag": listed.pipeline_tag,
            "architecture": config["architectures"][0], "downloads": listed.downloads,
            "trending_score": listed.trending_score,
            "created_at": listed.created_at[:10],  # the date of the listed time
            "gated": listed.gated,
        }
        assert hit["checkpoints"][0]["repo"] == hit["repo"]
    assert [h["downloads"] for h in data["hits"]] == sorted(
        (h["downloads"] for h in data["hits"]), reverse=True)
