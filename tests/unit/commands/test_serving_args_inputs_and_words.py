"""The command line's inputs and words: one context parser for every command (``32k``,
``32768``, ``32K``), the long-documents use case's own context, weight bits as the checkpoint
holds them, rejections without ".;" or a negative shortfall, and a starred spec line only
where a value is starred."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from kvpilot.core import cli
from kvpilot.core.commands.gpu import spec_line
from kvpilot.core.fit.recommend import weight_bits_of
from kvpilot.core.hardware.specs import lookup
from kvpilot.core.models.catalog import all_checkpoint_specs


@pytest.mark.parametrize("command", ["plan", "serve", "export", "recommend"])
@pytest.mark.parametrize("text", ["32k", "32768", "32K", "32,768"])
def test_every_command_reads_a_context_the_same_way(command: str, text: str) -> None:
    args = cli.build_parser(command).parse_args(
        [command, "--model", "m", "--max-model-len", text])
    got = args.context if command == "recommend" else args.max_model_len
    assert got == 32768


@pytest.mark.parametrize("command", ["plan", "serve", "export"])
def test_a_context_that_is_no_number_is_one_sentence_not_invalid_int(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.build_parser(command).parse_args([command, "--model", "m", "--max-model-len", "lots"])
    err = capsys.readouterr().err
    assert caught.value.code == 2
    assert "invalid int value" not in err
    assert "context 'lots' is not a number of tokens" in err and "(e.g. 8192 or 32k)" in err


pytestmark = pytest.mark.usefixtures("isolated_cli")


def _recommend(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert cli.main(["recommend", "--gpu", "RTX 4090", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_long_documents_plan_a_long_context_unless_told(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert _recommend(capsys, "--use-case", "long-docs")["goal"]["context"] == 32768
    assert _recommend(capsys, "--use-case", "chat")["goal"]["context"] == 8192
    told = _recommend(capsys, "--use-case", "long-docs", "--context", "16k")
    assert told["goal"]["context"] == 16384


def test_rejections_read_without_doubled_punctuation_or_negative_kv(
    capsys: pytest.CaptureFixture[str]
) -> None:
    out = _recommend(capsys, "--limit", "100")
    reasons = [r["reason"] for r in out["rejected"]]
    assert reasons
    assert not [r for r in reasons if ".;" in r]
    assert not [r for r in reasons if "needs -" in r or "needs 0.0 GiB" in r]


def test_the_text_table_says_one_user_and_separates_thousands(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["recommend", "--gpu", "H100 SXM", "--context", "1k", "--users", "1"]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].endswith("· 1 user")
    assert "1 users" not in text
    for line in text.splitlines()[3:]:
        if "tok/s" in line:
            rate = line.split("~", 1)[1].split(" tok/s", 1)[0]
            assert rate.replace(",", "").isdigit() and (len(rate) < 4 or "," in rate)


def test_bits_are_the_checkpoints_own() -> None:
    spec = next(s for s in all_checkpoint_specs() if s.quantization is None)
    assert weight_bits_of(replace(spec, torch_dtype="float32")) == 32
    assert weight_bits_of(replace(spec, torch_dtype="bfloat16")) == 16
    quantized = next(s for s in all_checkpoint_specs()
                     if s.quantization is not None and s.quantization.bits == 4)
    assert weight_bits_of(quantized) == 4


def test_the_unverified_note_comes_only_with_a_star() -> None:
    verified = lookup(None, "NVIDIA GeForce RTX 4090")
    line = spec_line(verified)
    assert "*" not in line and "unverified" not in line
    estimated = lookup(None, "NVIDIA GeForce RTX 4090 D")
    line = spec_line(estimated)
    assert "GB/s*" in line and "TFLOPS*" in line and line.endswith("(* unverified value)")


def test_a_screenshot_size_reads_as_width_by_height(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser("gui").parse_args(["gui", "--screenshot-size", "1366x768"])
    assert args.screenshot_size == (1366, 768)
    assert cli.build_parser("gui").parse_args(["gui"]).screenshot_size == (1400, 940)
    with pytest.raises(SystemExit):
        cli.build_parser("gui").parse_args(["gui", "--screenshot-size", "big"])
    assert "'big' is not a size like 1366x768" in capsys.readouterr().err
