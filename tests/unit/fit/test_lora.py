"""LoRA slots in the plan: the GPU stacks vLLM's LoRA layers allocate, per release, and the
verdicts they change.

The expected sizes are written out from the tensor shapes of ``create_lora_weights`` in
vLLM's ``lora/layers/`` (0.20.0 and 0.32.0 wheels: MergedQKVParallelLinearWithLoRA,
RowParallelLinearWithLoRA, MergedColumnParallelLinearWithLoRA, FusedMoEWithLoRA,
LogitsProcessorWithLoRA, VocabParallelEmbeddingWithLoRA) and the fixtures' config.json.
"""

from __future__ import annotations

from dataclasses import replace

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.plan import VERDICT_DOES_NOT_FIT, VERDICT_FITS
from kvpilot.core.base.units import GiB
from kvpilot.core.fit import lora
from kvpilot.core.fit.budget import compute_capacity


def _llama8b_elements(r: int) -> int:
    """One slot of Llama-3.1-8B (h 4096, 32 heads x 128, 8 KV heads, i 14336, 32 layers,
    vocab 128256), shape by shape."""
    h, q, kvd, i, layers, vocab = 4096, 32 * 128, 8 * 128, 14336, 32, 128256
    qkv = 3 * (r * h) + (q * r + 2 * kvd * r)  # A: 3 x (r, h); B: (q, r), 2 x (kv, r)
    o_proj = r * q + h * r  # A (r, q); B (h, r)
    gate_up = 2 * (r * h) + 2 * (i * r)  # A 2 x (r, h); B 2 x (i, r)
    down = r * i + h * r  # A (r, i); B (h, r)
    lm_head = r * h + vocab * r  # LogitsProcessorWithLoRA: A (r, h); B (vocab, r)
    embed = vocab * r + h * r  # VocabParallelEmbeddingWithLoRA: A (vocab, r); B (h, r)
    return layers * (qkv + o_proj + gate_up + down) + lm_head + embed


def test_llama_slot_bytes_follow_vllms_stacks(llama8b):
    assert lora.per_slot_elements(llama8b, 16) == _llama8b_elements(16) == 46_178_304
    budget = lora.lora_budget(llama8b, max_loras=4, max_lora_rank=64, max_cpu_loras=None,
                              lora_dtype=None, max_num_batched_tokens=2048)
    assert budget.per_slot_bytes == _llama8b_elements(64) * 2  # bf16 checkpoint: lora_dtype auto
    assert budget.slot_bytes == 4 * budget.per_slot_bytes
    assert budget.max_cpu_loras == 4  # config/lora.py: max_cpu_loras defaults to max_loras
    assert budget.lm_head_wrapped
    assert budget.failure is None


def test_moe_experts_get_per_expert_stacks():
    moe = fixture_spec("qwen3-30b-a3b", None)
    r, h, q, kvd, e, i, layers, vocab = 16, 2048, 4096, 512, 128, 768, 48, 151936
    attn = 3 * r * h + (q + 2 * kvd) * r + r * q + h * r
    # FusedMoEWithLoRA: w13 A 2 x (E, r, h), w13 B 2 x (E, i, r), w2 A (E, r, i), w2 B (E, h, r)
    experts = e * (2 * r * h + 2 * i * r + r * i + h * r)
    router = r * h + e * r  # the gate is a ReplicatedLinear: A (r, h), B (E, r)
    head_and_embed = 2 * (r * h + vocab * r)
    expected = layers * (attn + experts + router) + head_and_embed
    assert lora.per_slot_elements(moe, r) == expected
    assert expected * 2 > 1.5 * GiB  # one rank-16 slot of a 30B MoE is over 1.5 GiB


def test_qwen2_has_no_lm_head_stacks(qwen7b):
    # Qwen2ForCausalLM lists no embedding_modules in vLLM's qwen2.py
    budget = lora.lora_budget(qwen7b, max_loras=1, max_lora_rank=16, max_cpu_loras=None,
                              lora_dtype="float16", max_num_batched_tokens=2048)
    assert not budget.lm_head_wrapped
    h, i, layers = 3584, 18944, 28
    q, kvd, r = 28 * 128, 4 * 128, 16
    per_layer = (3 * r * h + (q + 2 * kvd) * r + r * q + h * r
                 + 2 * r * h + 2 * i * r + r * i + h * r)
    assert budget.per_slot_bytes == layers * per_layer * 2


def test_releases_before_0_20_pad_the_vocabulary(llama8b):
    new = lora.per_slot_elements(llama8b, 16, vllm_version="0.20.0")
    old = lora.per_slot_elements(llama8b, 16, vllm_version="0.11.0")
    vocab, padded = 128256, 128512  # 128256 + 256 extra, rounded up to 256
    assert old - new == (padded - vocab) * 16 + 256 * 16


def test_vllm_refusals_are_predicted(llama8b):
    bad_rank = compute_capacity(rtx4090(llama8b, enable_lora=True, max_lora_rank=24,
                                        max_model_len=4096))
    assert bad_rank.failure is not None and bad_rank.failure.kind == failures.BAD_FLAG_VALUE
    assert bad_rank.verdict == VERDICT_DOES_NOT_FIT
    few_cpu = compute_capacity(rtx4090(llama8b, enable_lora=True, max_loras=4, max_cpu_loras=2,
                                       max_model_len=4096))
    assert few_cpu.failure is not None and "max_cpu_loras (2)" in few_cpu.failure.message


def test_slots_come_out_of_the_kv_cache_and_widen_the_band(llama8b):
    plain = compute_capacity(rtx4090(llama8b, max_model_len=8192, vllm_version="0.20.0"))
    with_lora = compute_capacity(rtx4090(llama8b, max_model_len=8192, vllm_version="0.20.0",
                                         enable_lora=True, max_loras=2, max_lora_rank=32))
    slots = 2 * _llama8b_elements(32) * 2
    assert with_lora.weights_bytes - plain.weights_bytes == slots
    # CUDA graphs captured without and with adapters: 1.5 x, the band covers 1 x to 2 x
    assert abs(with_lora.cudagraph_bytes - 1.5 * plain.cudagraph_bytes) <= 1
    drop = plain.available_kv_bytes - with_lora.available_kv_bytes
    assert drop >= slots + plain.cudagraph_bytes // 2
    plain_half = (plain.available_kv_band_bytes[1] - plain.available_kv_band_bytes[0]) // 2
    lora_half = (with_lora.available_kv_band_bytes[1] - with_lora.available_kv_band_bytes[0]) // 2
    assert lora_half - plain_half == plain.cudagraph_bytes // 2
    assert with_lora.inputs["lora_slot_bytes"] == slots
    assert with_lora.inputs["max_loras"] == 2 and with_lora.inputs["max_lora_rank"] == 32


def test_many_large_slots_turn_a_fitting_plan_into_no_fit(llama8b):
    base = rtx4090(llama8b, max_model_len=32768, vllm_version="0.20.0")
    assert compute_capacity(base).verdict == VERDICT_FITS
    heavy = compute_capacity(replace(base, enable_lora=True, max_loras=8, max_lora_rank=64))
    assert heavy.verdict == VERDICT_DOES_NOT_FIT
    assert heavy.failure is not None and heavy.failure.kind == failures.KV_CACHE_TOO_SMALL
    assert heavy.inputs["lora_slot_bytes"] == 8 * _llama8b_elements(64) * 2


def test_0_11_accepts_no_rank_1():
    assert 1 in lora.allowed_ranks("0.20.0") and 1 not in lora.allowed_ranks("0.11.0")
    assert lora.allowed_ranks("0.32.0") == lora.ALLOWED_RANKS


def test_fully_sharded_stacks_split_the_rank_and_the_hidden_rows(llama8b):
    """--fully-sharded-loras under TP 2 (base_linear.py / column_parallel_linear.py
    create_lora_weights): column-parallel A stacks hold rank / 2 rows, row-parallel B stacks
    hidden / 2; the B stacks of column-parallel layers and the A stacks of row-parallel ones are
    per-rank slices either way; lm_head and embedding stacks stay whole. Per layer at rank 16:
    qkv A 3 x (8, 4096), B (2048 + 2 x 512, 16); o_proj A (16, 2048), B (2048, 16); gate_up
    A 2 x (8, 4096), B 2 x (7168, 16); down A (16, 7168), B (2048, 16)."""
    layer = (3 * 8 * 4096 + (2048 + 2 * 512) * 16 + 16 * 2048 + 2048 * 16
             + 2 * 8 * 4096 + 2 * 7168 * 16 + 16 * 7168 + 2048 * 16)
    heads = 16 * 4096 + 128256 * 16 + 128256 * 16 + 4096 * 16
    assert lora.per_slot_elements(llama8b, 16, 2, fully_sharded=True) \
        == 32 * layer + heads == 25_206_784
    # without it each rank holds the whole rank and hidden rows: 32,546,816
    assert lora.per_slot_elements(llama8b, 16, 2) == 32_546_816


def test_fully_sharded_needs_a_rank_the_gpus_divide(llama8b):
    budget = lora.lora_budget(llama8b, max_loras=1, max_lora_rank=16, max_cpu_loras=None,
                              lora_dtype=None, max_num_batched_tokens=2048,
                              tensor_parallel_size=3, fully_sharded=True)
    assert budget.failure is not None and budget.failure.kind == failures.BAD_FLAG_VALUE
    assert "not divisible by 3" in budget.failure.message
    cap = compute_capacity(rtx4090(llama8b, max_model_len=8192, tensor_parallel_size=2,
                                   enable_lora=True, fully_sharded_loras=True))
    assert cap.failure is None
    assert cap.inputs["lora_bytes_per_slot"] == 25_206_784 * 2


def test_phi3_inherits_llamas_lm_head_and_embedding_stacks():
    """Phi3ForCausalLM subclasses LlamaForCausalLM (phi3.py, 0.20.0 and 0.32.0) and so lists
    lm_head and embed_tokens among its embedding modules: Phi-4-mini (hidden 3072, vocab
    200064) gets lm_head A (16, 3072), B (200064, 16) and embedding A (200064, 16), B (3072, 16)
    per slot."""
    phi = fixture_spec("phi-4-mini-instruct")
    assert phi.architecture == "Phi3ForCausalLM"
    unwrapped = replace(phi, architecture="Qwen2ForCausalLM")  # a class listing none
    assert lora.per_slot_elements(phi, 16) - lora.per_slot_elements(unwrapped, 16) \
        == 16 * 3072 + 200064 * 16 + 200064 * 16 + 3072 * 16


def test_gemma4_moe_layers_wrap_the_dense_mlp_beside_the_experts():
    """Gemma 4 26B-A4B (hidden 2816, 30 layers, intermediate 2112 beside 128 experts of 704):
    each layer's dense MLP gets gate_up A 2 x (16, 2816), B 2 x (2112, 16) and down A
    (16, 2112), B (2816, 16) per slot on top of the experts' stacks."""
    model = fixture_spec("gemma-4-26b-a4b")
    assert model.moe is not None and model.intermediate_size == 2112
    experts_only = replace(model, model_type="mixtral")  # a MoE type with no dense MLP
    dense = 2 * 16 * 2816 + 2 * 2112 * 16 + 16 * 2112 + 2816 * 16
    assert lora.per_slot_elements(model, 16) - lora.per_slot_elements(experts_only, 16) \
        == 30 * dense
