"""vLLM's free-memory start-up check, made again with the reading of the moment of launch."""

from __future__ import annotations

from fitkit import rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import CUDA_CONTEXT_BYTES
from kvpilot.core.fit.startup import startup_refusal

TOTAL = 24564 << 20


def test_enough_free_memory_passes(qwen7b: ModelSpec) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.9)
    # 0.9 x total plus vLLM's CUDA context is what the check asks for
    needed = int(0.9 * TOTAL) + CUDA_CONTEXT_BYTES
    assert startup_refusal(inputs, needed + (1 << 20)) is None
    assert startup_refusal(inputs, needed - (1 << 20)) is not None


def test_a_browser_opened_since_planning_is_named_with_the_gib_to_close(
    qwen7b: ModelSpec,
) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192, gpu_memory_utilization=0.9,
                     gpu_free_bytes=TOTAL - GiB // 2)
    free_now = TOTAL - 3 * GiB
    holders = (("firefox", 2 * GiB), ("Xorg", GiB // 2))
    refusal = startup_refusal(inputs, free_now, holders)
    assert refusal is not None
    assert refusal.failure.kind == failures.FREE_MEMORY_BELOW_UTILIZATION
    # the plan carried with the refusal is the one made with the reading at launch
    assert refusal.inputs.gpu_free_bytes == free_now
    assert refusal.inputs.gpu_memory_holders == holders
    assert refusal.inputs.max_model_len == 8192
    message = refusal.failure.message
    assert "firefox (2.0 GiB)" in message and "Xorg (0.5 GiB)" in message
    shortfall = int(0.9 * TOTAL) - (free_now - CUDA_CONTEXT_BYTES)
    assert f"closing {shortfall / GiB:.2f} GiB" in message


def test_other_failures_are_not_a_start_up_refusal(qwen7b: ModelSpec) -> None:
    # a context above the model's limit fails the plan, but not vLLM's free-memory check
    inputs = rtx4090(qwen7b, max_model_len=10_000_000)
    assert startup_refusal(inputs, TOTAL) is None

