"""LoRA, speculative decoding and the runner: one setting each, passed to ``vllm serve`` with
vLLM's spelling, from the CLI flags of plan / recommend / serve / export."""

from __future__ import annotations

import argparse
import json

import pytest

from kvpilot.core.base.errors import CommandError, FitError
from kvpilot.core.commands.serving_args import add_serving_arguments, settings_from_args
from kvpilot.core.vllm.command import LaunchSpec, adapter_argv, build_argv_tail, build_command


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    return parser.parse_args(list(flags))


def test_flags_become_settings_and_the_argv_tail():
    spec_json = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'
    settings = settings_from_args(_parse(
        "--enable-lora", "--max-loras", "2", "--max-lora-rank", "32", "--max-cpu-loras", "4",
        "--lora-dtype", "bfloat16", "--speculative-config", spec_json, "--runner", "generate",
    ))
    assert settings.enable_lora and settings.max_loras == 2 and settings.max_lora_rank == 32
    assert settings.max_cpu_loras == 4 and settings.lora_dtype == "bfloat16"
    assert settings.speculative_config == spec_json and settings.runner == "generate"
    tail = build_argv_tail(LaunchSpec(model="/m", **{
        name: getattr(settings, name) for name in (
            "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
            "speculative_config", "runner")}))
    assert tail[tail.index("--runner") + 1] == "generate"
    assert "--enable-lora" in tail
    for flag, value in (("--max-loras", "2"), ("--max-lora-rank", "32"),
                        ("--max-cpu-loras", "4"), ("--lora-dtype", "bfloat16")):
        assert tail[tail.index(flag) + 1] == value
    passed = json.loads(tail[tail.index("--speculative-config") + 1])
    assert passed == json.loads(spec_json)


def test_auto_runner_and_no_lora_add_nothing():
    settings = settings_from_args(_parse("--runner", "auto"))
    assert settings.runner is None and not settings.enable_lora
    assert adapter_argv(settings) == []


@pytest.mark.parametrize(("flags", "says"), [
    (("--max-loras", "2"), "need --enable-lora"),
    (("--enable-lora", "--max-lora-rank", "0"), "at least 1"),
    (("--speculative-config", "{oops"), "not JSON"),
    (("--speculative-config", "[3]"), "JSON object"),
])
def test_bad_flags_say_what_is_wrong(flags, says):
    with pytest.raises(FitError, match=says):
        settings_from_args(_parse(*flags))


def test_the_command_refuses_lora_settings_without_lora():
    with pytest.raises(CommandError, match="enable_lora"):
        build_command(LaunchSpec(model="/m", max_loras=2))


def test_extra_args_cannot_override_the_adapter_settings():
    with pytest.raises(CommandError, match="LoRA"):
        build_command(LaunchSpec(model="/m", extra_args=("--max-loras", "3")))
