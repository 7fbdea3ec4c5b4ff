"""--language-model-only plans as text only (no tower, no encoder profile)."""

from __future__ import annotations

from fitkit import fixture_spec, rtx4090

from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import compute_capacity


def test_language_model_only_plans_as_text_only() -> None:
    vlm = fixture_spec("qwen2-vl-7b-instruct", weights_bytes=int(15.5 * GiB))
    text = compute_capacity(rtx4090(vlm, max_model_len=8192, limit_mm_per_prompt=0,
                                    vllm_version="0.29.0"))
    lmo = compute_capacity(rtx4090(vlm, max_model_len=8192, language_model_only=True,
                                   vllm_version="0.29.0"))
    images = compute_capacity(rtx4090(vlm, max_model_len=8192, vllm_version="0.29.0"))
    assert lmo.available_kv_bytes == text.available_kv_bytes
    assert lmo.available_kv_bytes > images.available_kv_bytes  # no encoder profile, no tower
