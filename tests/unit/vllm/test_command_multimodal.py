"""``--limit-mm-per-prompt``: one setting, the argv each vLLM release parses, the CLI flag."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kvpilot.core.base.errors import CommandError
from kvpilot.core.commands.serving_args import (
    add_serving_arguments,
    parse_mm_limit,
    settings_from_args,
)
from kvpilot.core.runtimes.discovery import FlagSet, VllmRuntime, parse_help_flags
from kvpilot.core.vllm.command import (
    LaunchSpec,
    build_argv_tail,
    build_command,
    limit_mm_argv,
    parse_extra_args,
)


@pytest.mark.parametrize(
    ("version", "images", "value"),
    [
        # 0.6.6 / 0.7.3: nullable_kvs only ("image=16,video=2")
        ("0.6.6", 0, "image=0,video=0"),
        ("0.7.3", 2, "image=2"),
        # 0.8.5 / 0.9.2: JSON (key=value deprecated); 0.10 on: JSON only
        ("0.8.5", 0, '{"image":0,"video":0}'),
        ("0.10.2", 1, '{"image":1}'),
        ("0.20.2", 0, '{"image":0,"video":0}'),
        ("0.32.0+cpu", 4, '{"image":4}'),
        (None, 0, '{"image":0,"video":0}'),
    ],
)
def test_limit_mm_argv_per_release(version, images, value) -> None:
    argv = limit_mm_argv(images, version)
    assert argv == ["--limit-mm-per-prompt", value]
    if value.startswith("{"):
        assert json.loads(value)["image"] == images


def test_argv_tail_carries_the_setting_only_when_set() -> None:
    assert "--limit-mm-per-prompt" not in build_argv_tail(LaunchSpec(model="m"))
    tail = build_argv_tail(LaunchSpec(model="m", limit_mm_per_prompt=0), "0.6.6")
    assert tail[-2:] == ["--limit-mm-per-prompt", "image=0,video=0"]


def test_build_command_uses_the_runtime_release(data_dir: Path) -> None:
    flags = FlagSet(
        "0.33.0", parse_help_flags((data_dir / "serve_help_0.33_excerpt.txt").read_text())
    )
    rt = VllmRuntime(("vllm",), "0.33.0", "path", "/usr/bin/vllm")
    cmd = build_command(LaunchSpec(model="Qwen/Qwen2-VL-7B-Instruct", limit_mm_per_prompt=0),
                        rt, flags=flags)
    i = cmd.argv.index("--limit-mm-per-prompt")
    assert cmd.argv[i + 1] == '{"image":0,"video":0}'


def test_negative_limit_is_refused() -> None:
    with pytest.raises(CommandError, match="limit_mm_per_prompt"):
        build_command(LaunchSpec(model="m", limit_mm_per_prompt=-1))


def test_extra_args_may_not_set_it() -> None:
    with pytest.raises(CommandError, match="images per prompt"):
        parse_extra_args('--limit-mm-per-prompt \'{"image": 2}\'')


@pytest.mark.parametrize(
    ("text", "images"),
    [("0", 0), ("3", 3), ('{"image": 2, "video": 0}', 2), ("image=5,video=1", 5)],
)
def test_cli_flag_reads_images_per_prompt(text, images) -> None:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    args = parser.parse_args(["--limit-mm-per-prompt", text])
    assert settings_from_args(args).limit_mm_per_prompt == images


@pytest.mark.parametrize("text", ["-1", "many", '{"video": 2}', "{broken"])
def test_cli_flag_refuses_what_is_not_a_count(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="images per prompt"):
        parse_mm_limit(text)


def test_flag_default_leaves_vllm_default() -> None:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    assert settings_from_args(parser.parse_args([])).limit_mm_per_prompt is None


def test_a_text_only_plan_launches_with_images_disabled() -> None:
    from fitkit import fixture_spec, rtx4090

    inputs = rtx4090(fixture_spec("qwen2-vl-7b-instruct", 16_582_751_232),
                     max_model_len=32768, limit_mm_per_prompt=0)
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen2-VL-7B-Instruct")
    assert spec.limit_mm_per_prompt == 0
    tail = build_argv_tail(spec, "0.10.2")
    assert tail[tail.index("--limit-mm-per-prompt") + 1] == '{"image":0,"video":0}'
