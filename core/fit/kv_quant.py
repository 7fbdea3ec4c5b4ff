"""The packed ``--kv-cache-dtype`` values of vLLM 0.29+: bytes of one head's K and V per token.

vLLM 0.29.0's ``CacheDType`` literal (``config/cache.py``) adds, beside the 16-bit and FP8
kinds, KV caches whose page holds packed data and scales; the attention backend that serves
each one sets the bytes per head and token (``customize_spec``, 0.29.0 wheel):

* ``nvfp4``, ``nvfp4_4over6`` (FlashInfer): K and V each ``head/2`` bytes of FP4 data plus
  ``head/16`` bytes of FP8 block scales (``utils/torch_utils.py`` ``nvfp4_kv_cache_full_dim``);
* ``int8_per_token_head``, ``fp8_per_token_head`` (Triton): one byte per value plus one float32
  scale per token and head for K and for V; ``int4_per_token_head`` packs two values a byte;
* ``turboquant_*`` (TurboQuant): K and V packed into one slot per head
  (``quantization/turboquant/config.py``): FP8 keys take a byte per value, MSE keys
  ``ceil(head x bits / 8)`` bytes and a float16 norm; values ``ceil(head x bits / 8)`` bytes and a
  float16 scale and zero; the slot is rounded up to an even byte count.
"""

from __future__ import annotations

import math

#: (key bits, value bits) of each TurboQuant preset (``TQ_PRESETS``, 0.29.0 wheel); 8-bit keys
#: are FP8
TURBOQUANT_BITS = {
    "turboquant_k8v4": (8, 4),
    "turboquant_4bit_nc": (4, 4),
    "turboquant_k3v4_nc": (3, 4),
    "turboquant_3bit_nc": (3, 3),
}
NVFP4_KV_DTYPES = frozenset({"nvfp4", "nvfp4_4over6"})
#: per-token-head kinds: bytes per stored value (int4 packs two a byte; halves below)
PER_TOKEN_HEAD_KV_DTYPES = frozenset({"int8_per_token_head", "fp8_per_token_head",
                                      "int4_per_token_head"})
#: every packed value; the rest of 0.29's literal (auto, float16, bfloat16, fp8, fp8_e4m3,
#: fp8_e5m2, fp8_inc, fp8_ds_mla) stores one plain element per value
PACKED_KV_DTYPES = NVFP4_KV_DTYPES | PER_TOKEN_HEAD_KV_DTYPES | frozenset(TURBOQUANT_BITS)
#: the scale vLLM keeps per token, head and side with the per-token-head kinds (float32)
_SCALE_BYTES = 4


def is_packed(kv_cache_dtype: str) -> bool:
    """Whether ``kv_cache_dtype`` is one of the packed kinds above."""
    return kv_cache_dtype.lower() in PACKED_KV_DTYPES


def head_bytes(kv_cache_dtype: str, head_size: int, elem_bytes: int) -> int:
    """Bytes of one head's K and V for one token (``elem_bytes`` per value for plain kinds)."""
    kind = kv_cache_dtype.lower()
    if kind in NVFP4_KV_DTYPES:
        return 2 * (head_size // 2 + head_size // 16)
    if kind in PER_TOKEN_HEAD_KV_DTYPES:
        data = head_size // 2 if kind == "int4_per_token_head" else head_size
        return 2 * data + 2 * _SCALE_BYTES
    if kind in TURBOQUANT_BITS:
        key_bits, value_bits = TURBOQUANT_BITS[kind]
        key = head_size if key_bits == 8 else math.ceil(head_size * key_bits / 8) + 2
        value = math.ceil(head_size * value_bits / 8) + 4
        slot = key + value
        return slot + slot % 2
    return 2 * head_size * elem_bytes
