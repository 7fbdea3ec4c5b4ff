"""The V2 sampler's penalty tables (v1/worker/gpu/sample/penalties.py) and where the plan counts
them in the KV budget."""

from __future__ import annotations

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit import v2_sampler_states
from kvpilot.core.fit.budget import compute_capacity

QWEN3_8B = fixture_spec("qwen3-8b", weights_bytes=int(15.3 * GiB))  # vocabulary 151,936
QWEN3_30B_A3B = fixture_spec("qwen3-30b-a3b", weights_bytes=int(15.3 * GiB))


def test_the_tables_are_an_int32_count_and_a_packed_mask_per_slot() -> None:
    # 256 slots: counts 256 x 151,936 x 4 B, mask 256 x ceil(151,936 / 32) = 4,748 words x 4 B
    assert v2_sampler_states.penalty_state_bytes(max_num_seqs=256, vocab_size=151_936) == (
        155_582_464 + 4_861_952)
    assert v2_sampler_states.penalty_state_bytes(max_num_seqs=0, vocab_size=151_936) == 0


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        v2_sampler_states.penalty_state_bytes(max_num_seqs=-1, vocab_size=10)


def _budget_bytes(model: object, version: str, **kw: object) -> int:
    inputs = rtx4090(model, vllm_version=version, **kw)
    return v2_sampler_states.budget_bytes(inputs.model, inputs, max_num_seqs=256)


@pytest.mark.parametrize(("version", "eager", "counted"), [
    ("0.26.0", True, False),   # outside 0.26's budget (weights + non-torch + torch peak)
    ("0.27.1", True, True),    # total_consumed holds them from 0.27
    ("0.28.0", False, True),   # compiled: total_consumed holds them all the same
    ("0.28.0", True, True),
    ("0.29.0", False, True),   # the V2 runner's own graph estimate from 0.29
])
def test_counted_where_vllms_budget_holds_them(version: str, eager: bool,
                                                counted: bool) -> None:
    tables = v2_sampler_states.penalty_state_bytes(max_num_seqs=256, vocab_size=151_936)
    got = _budget_bytes(QWEN3_8B, version, enforce_eager=eager)
    assert got == (tables if counted else 0)


def test_none_on_the_v1_runner_or_without_a_sampler() -> None:
    assert _budget_bytes(QWEN3_30B_A3B, "0.28.0", enforce_eager=True) == 0  # a MoE on V1
    assert _budget_bytes(QWEN3_8B, "0.29.0", runner="pooling") == 0


def test_the_plan_takes_them_out_of_the_kv_budget_and_says_so() -> None:
    def plan(version: str):
        return compute_capacity(rtx4090(QWEN3_8B, max_model_len=8192, vllm_version=version,
                                        max_num_seqs=256, gpu_memory_utilization=0.9))

    tables = v2_sampler_states.penalty_state_bytes(max_num_seqs=256, vocab_size=151_936)
    on_028 = plan("0.28.0")
    note = next(t.note for t in on_028.terms if t.name == "non_torch")
    assert "penalty tables" in note and f"{tables / GiB:.2f} GiB" in note
    on_026 = plan("0.26.0")  # outside 0.26's budget
    assert "penalty tables" not in next(t.note for t in on_026.terms if t.name == "non_torch")
    assert on_028.non_torch_bytes - on_026.non_torch_bytes == tables
