"""Build a tiny random Llama checkpoint for end-to-end tests, with no downloads.

Run with the vLLM environment's interpreter (it has torch, transformers and tokenizers)::

    .venv-vllm/bin/python tests/e2e/make_tiny_model.py [--cache-dir DIR]

The model is a ``LlamaForCausalLM`` with hidden 128, intermediate 256, 2 layers, 4 heads, 2 KV
heads, head_dim 32 (the CPU attention backend needs >= 32), max_position_embeddings 2048 and a
1024-entry byte-level BPE vocabulary trained here on synthetic text; it carries a ChatML chat
template and is saved as safetensors in float32. The result is cached in
``<cache-dir>/<hash of this file>`` so that a second run returns at once. The last line printed is
the model directory.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
DEFAULT_CACHE = HERE.parents[2] / ".cache" / "tiny-model"
VOCAB_SIZE = 1024
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
WORDS = [
    "the",
    "a",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "model",
    "token",
    "cache",
    "memory",
    "server",
    "request",
    "answer",
    "question",
    "hello",
    "world",
    "blue",
    "green",
    "red",
    "fast",
    "slow",
    "small",
    "large",
    "river",
    "mountain",
    "city",
    "number",
    "letter",
    "word",
    "story",
    "light",
    "dark",
    "north",
    "south",
    "east",
    "west",
    "time",
    "day",
    "night",
    "yes",
    "no",
    "and",
    "or",
    "but",
    "if",
    "then",
    "when",
    "while",
    "because",
    "after",
    "before",
    "under",
    "over",
    "with",
    "without",
    "into",
    "from",
    "about",
]


def script_digest() -> str:
    """Hash of this file: the cache key (any change to the recipe rebuilds the model)."""
    return hashlib.sha256(HERE.read_bytes()).hexdigest()[:16]


def synthetic_corpus(lines: int, seed: int = 0) -> list[str]:
    """Deterministic pseudo-sentences over a small vocabulary plus digits and punctuation."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(4, 16)
        words = [rng.choice(WORDS) for _ in range(n)]
        if rng.random() < 0.3:
            words.append(str(rng.randint(0, 9999)))
        out.append(" ".join(words) + rng.choice([".", "?", "!", ","]))
    return out


def build(target: Path) -> None:
    """Write tokenizer, config and random weights into ``target`` (a fresh directory)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(synthetic_corpus(20_000), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="<|im_end|>",
        pad_token="</s>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(target))

    vocab = tok.get_vocab_size()
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(target), safe_serialization=True)
    gen = target / "generation_config.json"
    if gen.exists():
        gen.unlink()  # let vLLM use its own sampling defaults


def ensure_model(cache_dir: Path) -> Path:
    """Return the cached model directory, building it first when missing."""
    final = cache_dir / script_digest()
    if _complete(final):
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    # a folder of this process's own: two test processes may build at the same moment, and
    # the first rename wins (a folder that is already complete is never replaced)
    tmp = cache_dir / f".{final.name}.{os.getpid()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    build(tmp)
    if final.exists() and not _complete(final):
        shutil.rmtree(final, ignore_errors=True)
    try:
        tmp.rename(final)
    except OSError:
        if not _complete(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _complete(folder: Path) -> bool:
    return (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    print(ensure_model(args.cache_dir.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
