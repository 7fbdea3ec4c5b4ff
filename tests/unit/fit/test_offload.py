"""--cpu-offload-gb: the weights vLLM 0.29.0's UVA offloader keeps in host memory."""

from __future__ import annotations

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import compute_capacity


def test_cpu_offload_takes_its_gib_off_the_weights_up_to_the_decoder_layers() -> None:
    qwen = fixture_spec("qwen3-8b", weights_bytes=int(15.3 * GiB))
    base = compute_capacity(rtx4090(qwen, max_model_len=8192))
    off = compute_capacity(rtx4090(qwen, max_model_len=8192, cpu_offload_gb=4))
    assert base.weights_bytes - off.weights_bytes == 4 * GiB
    assert off.available_kv_bytes - base.available_kv_bytes == 4 * GiB
    assert off.inputs["cpu_offloaded_bytes"] == 4 * GiB
    note = next(t.note for t in off.terms if t.name == "weights")
    assert "less 4.00 GiB of decoder-layer weights kept in host memory" in note
    # more than the decoder layers hold: the embedding and the head stay on the GPU
    everything = compute_capacity(rtx4090(qwen, max_model_len=8192, cpu_offload_gb=64))
    head_rows = qwen.vocab_size * qwen.hidden_size * 2 * (1 if qwen.tie_word_embeddings else 2)
    assert everything.weights_bytes >= head_rows
    assert everything.weights_bytes < base.weights_bytes - 10 * GiB
