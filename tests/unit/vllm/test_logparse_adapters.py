"""vLLM's refusals of LoRA settings, from the CPU engine's own lines (vLLM 0.32.0+cpu), are
classified so that the adapter fallbacks answer them."""

from __future__ import annotations

from fitkit import rtx4090

from kvpilot.core.base import failures as fk
from kvpilot.core.base.failures import Failure
from kvpilot.core.fit import fallback, fallback_adapters
from kvpilot.core.vllm.logparse import LogScanner


def _one_failure(*lines: str) -> Failure:
    scanner = LogScanner()
    found = [e for line in lines for e in scanner.feed(line) if isinstance(e, Failure)]
    assert found, lines
    return found[0]


def test_an_int_choice_without_quotes_is_a_bad_value(llama8b):
    # argparse prints an int choice without quotes (type=int)
    failure = _one_failure("vllm serve: error: argument --max-lora-rank: invalid choice: 24 "
                           "(choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)")
    assert (failure.kind, failure.details["flag"], failure.details["value"]) == (
        fk.BAD_FLAG_VALUE, "--max-lora-rank", "24")
    inputs = rtx4090(llama8b, max_model_len=4096, enable_lora=True, max_lora_rank=24)
    (fix,) = fallback.propose(failure, inputs)
    assert fix.kind == fallback_adapters.LORA_RANK_ACCEPTED and fix.inputs.max_lora_rank == 16


def test_too_few_cpu_slots_names_the_flag(llama8b):
    failure = _one_failure(
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for LoRAConfig",
        "  Value error, max_cpu_loras (2) must be >= max_loras (4). [type=value_error, "
        "input_value=ArgsKwargs((), {'max_lora...ne, 'max_cpu_loras': 2}), "
        "input_type=ArgsKwargs]",
    )
    assert failure.kind == fk.BAD_FLAG_VALUE and failure.details["flag"] == "--max-cpu-loras"
    inputs = rtx4090(llama8b, max_model_len=4096, enable_lora=True, max_loras=4,
                     max_cpu_loras=2)
    (fix,) = fallback.propose(failure, inputs)
    assert fix.kind == fallback_adapters.MORE_CPU_LORAS and fix.inputs.max_cpu_loras == 4


def test_the_vocabulary_limit_is_an_unsupported_model():
    failure = _one_failure("ValueError: When using LoRA, vocab size must be <= 258048")
    assert failure.kind == fk.UNSUPPORTED_MODEL and "258,048" in failure.message
