"""Several GPUs: per-GPU memory of tensor/pipeline-parallel plans, P2P, the recommender."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import GpuTarget
from kvpilot.core.fit import activation, parallel, v2_sampler_states
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.recommend import Goal, recommend, target_of
from kvpilot.core.hardware.target import gpu_set_from_names

QWEN3_8B_BYTES = 16_381_470_720


@pytest.fixture
def qwen3() -> object:
    return fixture_spec("qwen3-8b", QWEN3_8B_BYTES)


def test_gpu_lists_in_planner_mode():
    two = gpu_set_from_names("2x RTX 4090")
    assert two.label == "2x RTX 4090" and len(two.cards) == 2
    assert two.p2p is False and two.nvlink is False  # GeForce cards: no peer-to-peer
    mixed = gpu_set_from_names("RTX 4090 + RTX 3090")
    assert mixed.label == "RTX 4090 + RTX 3090"
    per = parallel.per_gpu(mixed.cards)
    assert per.total_bytes == min(c.total_bytes for c in mixed.cards)
    assert per.compute_capability == (8, 6)  # the 3090 bounds what both ranks can use
    with pytest.raises(FitError, match="unknown GPU 'RTX 9999'"):
        gpu_set_from_names("RTX 4090 + RTX 9999")
    with pytest.raises(FitError, match="cannot read the GPU list"):
        parallel.parse_gpu_names("RTX 4090 + ")


def test_tensor_parallel_splits_weights_and_kv_heads_per_gpu(qwen3):
    one = compute_capacity(rtx4090(qwen3, max_model_len=16384))
    two = compute_capacity(rtx4090(qwen3, max_model_len=16384, tensor_parallel_size=2,
                                   gpu_allreduce="host"))
    # half the checkpoint per rank, and each rank's own RoPE table
    assert two.weights_bytes == math.ceil(QWEN3_8B_BYTES / 2) + qwen3.rope_cache_bytes
    assert two.kv_bytes_per_token == one.kv_bytes_per_token // 2  # 8 KV heads -> 4 per rank
    # without P2P vLLM creates no custom all-reduce buffers: only NCCL's part of non-torch,
    # beside the V2 sampler's penalty tables of the newest releases
    tables = v2_sampler_states.penalty_state_bytes(max_num_seqs=two.max_num_seqs,
                                                   vocab_size=qwen3.vocab_size)
    assert two.non_torch_bytes == (activation.non_torch_bytes(2) - parallel.CUSTOM_ALLREDUCE_BYTES
                                   + tables)
    nccl = next(t for t in two.terms if t.name == "non_torch")
    assert "no custom all-reduce" in nccl.note
    p2p = compute_capacity(rtx4090(qwen3, max_model_len=16384, tensor_parallel_size=2,
                                   gpu_allreduce="p2p"))
    assert p2p.non_torch_bytes == activation.non_torch_bytes(2) + tables
    assert p2p.available_kv_bytes == two.available_kv_bytes - parallel.CUSTOM_ALLREDUCE_BYTES
    assert parallel.CUSTOM_ALLREDUCE_BYTES == 24 << 20
    # each rank holds half the heads, so twice the tokens fit in the freed memory and more
    assert two.kv_cache_tokens > 2 * one.kv_cache_tokens


def test_pipeline_parallel_splits_layers(qwen3):
    stage = parallel.stage_model(qwen3, 3)
    assert stage.num_hidden_layers == 12
    assert stage.weights_bytes == math.ceil(QWEN3_8B_BYTES * 12 / 36)
    cap = compute_capacity(rtx4090(qwen3, max_model_len=8192, pipeline_parallel_size=3))
    one = compute_capacity(rtx4090(qwen3, max_model_len=8192))
    assert cap.kv_bytes_per_token * 3 == one.kv_bytes_per_token
    assert cap.inputs["pipeline_parallel_size"] == 3
    with pytest.raises(FitError, match="more than the model's 36 layers"):
        parallel.stage_model(qwen3, 40)


def test_layouts_prefer_the_card_without_the_display_and_fall_back_to_pp(qwen3):
    cards = (
        GpuTarget("NVIDIA GeForce RTX 4090", 24 << 30, 22 << 30, (8, 9), 1.0e12, 165.0,
                      drives_display=True, index=0),
        GpuTarget("NVIDIA GeForce RTX 3090", 24 << 30, 23 << 30, (8, 6), 0.9e12, 71.0,
                      index=1),
    )
    gpus = parallel.GpuSet(cards, p2p=False, nvlink=False)
    found = parallel.layouts(qwen3, gpus)
    assert [x.cards for x in found] == [(1,), (0,), (0, 1)]
    assert found[0].note == "on GPU 1 (RTX 3090), not the display card"
    tp = found[-1]
    assert (tp.tensor_parallel_size, tp.allreduce) == (2, "host")
    assert "no P2P: all-reduce through host memory (slower)" in tp.note
    assert "Custom allreduce is disabled" in parallel.explain(tp)
    three = gpu_set_from_names("3x RTX 4090")
    pp = parallel.layouts(qwen3, three)[-1]
    assert (pp.tensor_parallel_size, pp.pipeline_parallel_size) == (1, 3)  # 32 heads, 3 GPUs
    assert "32 heads do not split 3 ways" in pp.note
    nvlink = parallel.GpuSet(cards, p2p=True, nvlink=True)
    assert parallel.layouts(qwen3, nvlink)[-1].allreduce == "nvlink"


def test_recommender_ranks_one_card_first_when_one_is_enough(qwen3):
    gpus = gpu_set_from_names("RTX 4090 + RTX 3090")
    goal = Goal(context_tokens=8192, users=2)
    rec = recommend(target_of(gpus.cards), goal, [qwen3], gpu_set=gpus)
    labels = [(c.gpus_label, c.inputs.tensor_parallel_size) for c in rec.candidates]
    assert labels == [("RTX 4090", 1), ("RTX 4090 + RTX 3090", 2)]
    single, both = rec.candidates
    assert single.score > both.score
    assert "no P2P" in both.reason
    assert both.capacity.weights_bytes == QWEN3_8B_BYTES // 2 + qwen3.rope_cache_bytes
    assert both.inputs.gpu_allreduce == "host"
    # the mixed pair plans each rank with the smaller card's memory
    assert both.inputs.gpu_total_bytes == parallel.per_gpu(gpus.cards).total_bytes


def test_recommender_needs_two_cards_for_a_long_goal(qwen3):
    gpus = gpu_set_from_names("2x RTX 4090")
    goal = Goal(context_tokens=40960, users=8)
    rec = recommend(target_of(gpus.cards), goal, [qwen3], gpu_set=gpus)
    assert [c.inputs.tensor_parallel_size for c in rec.candidates] == [2]
    assert rec.candidates[0].capacity.max_concurrency >= 8
    single = recommend(target_of(gpus.cards[:1]), goal, [qwen3])
    assert not single.candidates and single.rejected


def test_cli_recommend_two_gpus_json(capsys):
    import json

    from kvpilot.core.cli import main

    rc = main(["recommend", "--gpu", "2x RTX 4090", "--context", "32768", "--users", "4",
               "--model", "Qwen3-32B-AWQ", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    top = out["candidates"][0]
    assert top["gpus"] == "2x RTX 4090" and top["tensor_parallel_size"] == 2
    assert "all-reduce through host memory" in top["parallel_note"]


def test_replace_keeps_layout_defaults(qwen3):
    inputs = replace(rtx4090(qwen3), tensor_parallel_size=2)
    assert inputs.pipeline_parallel_size == 1 and inputs.gpu_allreduce is None


def test_cli_plan_on_two_local_gpus_says_no_custom_allreduce(monkeypatch, capsys, tmp_path):
    import json
    import shutil

    from fitkit import MODELS

    from kvpilot.core.cli import main

    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-rtx3090")
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    model = tmp_path / "qwen3"
    shutil.copytree(MODELS / "qwen3-8b", model)
    main(["plan", "--model", str(model), "--gpus", "0,1", "--max-model-len", "16384",
          "--gpu-memory-utilization", "0.85", "--vllm-version", "0.33.0", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["tensor_parallel_size"] == 2
    tables = v2_sampler_states.penalty_state_bytes(  # the V2 sampler's, 0.27+
        max_num_seqs=out["max_num_seqs"], vocab_size=151_936)
    assert out["non_torch_bytes"] == (activation.non_torch_bytes(2)
                                      - parallel.CUSTOM_ALLREDUCE_BYTES + tables)
    assert out["fits"] is True
