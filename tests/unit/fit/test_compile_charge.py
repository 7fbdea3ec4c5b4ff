"""A first torch.compile's benchmark of the embedding gather in vLLM's profiled peak
(kvpilot.core.fit.compile_charge)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit import compile_charge
from kvpilot.core.fit.budget import compute_capacity

QWEN25_7B = fixture_spec("qwen2.5-7b-instruct", weights_bytes=int(5.2 * GiB))  # 152,064 x 3,584
GEMMA4_E4B = fixture_spec("gemma-4-e4b-it", weights_bytes=int(9.8 * GiB))


def test_the_table_is_the_padded_vocabulary_a_rank_holds_times_the_hidden_size() -> None:
    # 152,064 rows are a multiple of 64 already: 152,064 x 3,584 x 2 B
    assert compile_charge.embedding_table_bytes(QWEN25_7B, 1) == 152_064 * 3_584 * 2
    # an odd vocabulary is padded to 64 rows, then split over the ranks (rounded up)
    odd = replace(QWEN25_7B, vocab_size=100_001)
    assert compile_charge.embedding_table_bytes(odd, 1) == 100_032 * 3_584 * 2
    assert compile_charge.embedding_table_bytes(odd, 3) == 33_344 * 3_584 * 2
    assert compile_charge.embedding_table_bytes(QWEN25_7B, 1, "float32") == 152_064 * 3_584 * 4
    with pytest.raises(ValueError, match="at least 1"):
        compile_charge.embedding_table_bytes(QWEN25_7B, 0)


@pytest.mark.parametrize(("version", "eager", "charged"), [
    ("0.11.0", False, False),  # torch 2.8: no combo-kernel benchmark
    ("0.12.0", False, True),
    ("0.28.0", False, True),
    ("0.28.0", True, False),   # --enforce-eager compiles nothing
])
def test_compiled_runs_from_0_12(version: str, eager: bool, charged: bool) -> None:
    inputs = rtx4090(QWEN25_7B, vllm_version=version, enforce_eager=eager)
    expected = compile_charge.embedding_table_bytes(QWEN25_7B, 1) if charged else 0
    assert compile_charge.charge_bytes(QWEN25_7B, inputs) == expected


def test_none_on_the_cpu_backend() -> None:
    # config/compilation.py sets the combo-kernel options only off the CPU platform
    cpu = rtx4090(QWEN25_7B, vllm_version="0.28.0", gpu_name="cpu")
    assert compile_charge.charge_bytes(QWEN25_7B, cpu) == 0


def test_a_multimodal_model_is_fed_embeddings_unless_text_only() -> None:
    assert GEMMA4_E4B.is_multimodal
    fed = rtx4090(GEMMA4_E4B, vllm_version="0.28.0")
    assert not compile_charge.feeds_token_ids(GEMMA4_E4B, fed)
    assert compile_charge.charge_bytes(GEMMA4_E4B, fed) == 0
    for text_only in (rtx4090(GEMMA4_E4B, vllm_version="0.28.0", limit_mm_per_prompt=0),
                      rtx4090(GEMMA4_E4B, vllm_version="0.28.0", language_model_only=True)):
        assert compile_charge.feeds_token_ids(GEMMA4_E4B, text_only)
        assert compile_charge.charge_bytes(GEMMA4_E4B, text_only) == (
            compile_charge.embedding_table_bytes(GEMMA4_E4B, 1))


def test_the_peak_is_the_larger_of_the_two_and_the_note_says_which() -> None:
    inputs = rtx4090(QWEN25_7B, vllm_version="0.28.0")
    table = compile_charge.embedding_table_bytes(QWEN25_7B, 1)
    assert compile_charge.peak_bytes(table // 2, QWEN25_7B, inputs) == table
    assert compile_charge.peak_bytes(2 * table, QWEN25_7B, inputs) == 2 * table
    assert "embedding gather" in compile_charge.note(table // 2, QWEN25_7B, inputs)
    assert compile_charge.note(2 * table, QWEN25_7B, inputs) == ""


def test_the_plan_charges_it_as_the_logs_show() -> None:
    """Qwen2.5-7B-AWQ on an RTX 4080 with 0.26.0 and on an L4 with 0.28.0 logs a 1.04 GiB peak at
    2,048 tokens, the size of its 1.02 GiB table; the eager plan's peak is well below it."""
    compiled = compute_capacity(rtx4090(QWEN25_7B, max_model_len=32768, vllm_version="0.28.0"))
    eager = compute_capacity(rtx4090(QWEN25_7B, max_model_len=32768, vllm_version="0.28.0",
                                     enforce_eager=True))
    assert eager.activation_peak_bytes < 0.5 * GiB
    assert abs(compiled.activation_peak_bytes / GiB - 1.04) < 0.03
    note = {t.name: t.note for t in compiled.terms}["activation_peak"]
    assert "1.02 GiB copy of the table" in note
