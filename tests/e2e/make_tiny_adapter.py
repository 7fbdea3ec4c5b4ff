"""Write a tiny LoRA adapter for the tiny e2e Llama, in PEFT's on-disk layout, with no library.

``adapter_config.json`` (peft_type LORA, rank ``r``, ``lora_alpha``, ``target_modules``) and
``adapter_model.safetensors`` holding ``base_model.model.model.layers.<i>.self_attn.<module>.
lora_A.weight`` (r x in) and ``lora_B.weight`` (out x r) as float32, written as safetensors:
an 8-byte little-endian header length, the JSON header, then the raw tensor bytes.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

#: the tiny model's widths (tests/e2e/make_tiny_model.py): hidden 128, 4 heads x 32, 2 KV heads
HIDDEN = 128
OUT_SIZES = {"q_proj": 4 * 32, "k_proj": 2 * 32, "v_proj": 2 * 32, "o_proj": HIDDEN}
IN_SIZES = {"q_proj": HIDDEN, "k_proj": HIDDEN, "v_proj": HIDDEN, "o_proj": 4 * 32}


def write_adapter(target: Path, base_model: str, *, rank: int = 8, layers: int = 2,
                  modules: tuple[str, ...] = ("q_proj", "v_proj"), seed: int = 0) -> Path:
    """Write the adapter into ``target`` (created) and return it."""
    rng = random.Random(seed)
    target.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, tuple[list[int], bytes]] = {}
    for layer in range(layers):
        for module in modules:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            shapes = {"lora_A": [rank, IN_SIZES[module]], "lora_B": [OUT_SIZES[module], rank]}
            for part, shape in shapes.items():
                count = shape[0] * shape[1]
                values = [rng.uniform(-0.01, 0.01) for _ in range(count)]
                tensors[f"{prefix}.{part}.weight"] = (shape, struct.pack(f"<{count}f", *values))
    header: dict[str, object] = {}
    offset = 0
    for name, (shape, data) in tensors.items():
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with (target / "adapter_model.safetensors").open("wb") as out:
        out.write(struct.pack("<Q", len(raw)))
        out.write(raw)
        for _, data in tensors.values():
            out.write(data)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": 2 * rank,
              "lora_dropout": 0.0, "bias": "none", "target_modules": list(modules),
              "base_model_name_or_path": base_model}
    (target / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return target
