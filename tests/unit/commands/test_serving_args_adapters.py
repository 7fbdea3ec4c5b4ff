"""`kvpilot plan`, `recommend`, `serve` and `export` take LoRA, speculative decoding and the
runner with vLLM's spelling: the plan counts them, the exported command passes them on."""

from __future__ import annotations

import json

import pytest
from testpaths import DATA

from kvpilot.core.cli import main

MODEL = str(DATA / "models" / "llama-3.1-8b-instruct")
ADAPTER_FLAGS = ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "32",
                 "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']


pytestmark = pytest.mark.usefixtures("isolated_cli")


def test_plan_json_counts_the_slots_and_the_drafter(capsys):
    rc = main(["plan", "--model", MODEL, "--gpu", "RTX 4090", "--max-model-len", "8192",
               *ADAPTER_FLAGS, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["inputs"]["enable_lora"] is True and out["inputs"]["max_loras"] == 2
    assert out["inputs"]["lora_slot_bytes"] == 2 * out["inputs"]["lora_bytes_per_slot"]
    assert out["inputs"]["speculative_method"] == "ngram"
    assert out["inputs"]["num_speculative_tokens"] == 3
    assert "LoRA stacks" in {t["name"]: t["note"] for t in out["terms"]}["weights"]


def test_recommend_plans_every_candidate_with_the_slots(capsys):
    rc = main(["recommend", "--gpu", "RTX 4090", "--context", "8192", "--enable-lora",
               "--max-loras", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["candidates"]
    for candidate in out["candidates"]:
        assert candidate["budget"]["inputs"]["lora_slot_bytes"] > 0


def test_export_passes_the_flags_to_vllm_serve(capsys):
    rc = main(["export", "--model", MODEL, "--gpu", "RTX 4090", "--max-model-len", "8192",
               *ADAPTER_FLAGS, "--runner", "generate"])
    text = capsys.readouterr().out
    assert rc == 0
    command = next(line for line in text.splitlines() if "vllm serve" in line)
    assert "--runner generate --enable-lora --max-loras 2 --max-lora-rank 32" in command
    assert """--speculative-config '{"method":"ngram","num_speculative_tokens":3}'""" in command


def test_lora_flags_without_enable_lora_are_refused_in_one_line(capsys):
    rc = main(["plan", "--model", MODEL, "--gpu", "RTX 4090", "--max-loras", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "need --enable-lora" in err


def test_fully_sharded_loras_reach_the_plan_and_the_command(capsys):
    flags = ["--model", MODEL, "--gpu", "RTX 4090", "--max-model-len", "8192",
             "--tensor-parallel-size", "2", "--enable-lora"]
    assert main(["plan", *flags, "--json"]) == 0
    whole = json.loads(capsys.readouterr().out)["inputs"]["lora_bytes_per_slot"]
    assert main(["plan", *flags, "--fully-sharded-loras", "--json"]) == 0
    sharded = json.loads(capsys.readouterr().out)["inputs"]["lora_bytes_per_slot"]
    assert sharded < whole
    assert main(["export", *flags, "--fully-sharded-loras"]) == 0
    command = next(line for line in capsys.readouterr().out.splitlines() if "vllm serve" in line)
    assert "--enable-lora --fully-sharded-loras" in command


def test_fully_sharded_loras_without_enable_lora_are_refused(capsys):
    rc = main(["plan", "--model", MODEL, "--gpu", "RTX 4090", "--fully-sharded-loras"])
    assert rc == 2 and "--fully-sharded-loras need --enable-lora" in capsys.readouterr().err
