"""Start-ups with LoRA slots or a drafter replayed by the validation (benchmarks/fit_accuracy.py):
vLLM's "Model loading took" figure holds the LoRA stacks and the drafter's weights
(``load_model`` builds them inside the same memory profiler), so a case's logged size is planned
without them and the plan adds them back once."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from fitkit import fixture_spec, rtx4090
from testpaths import REPO, load_script

from kvpilot.core.base.units import GiB
from kvpilot.core.fit import speculative
from kvpilot.core.fit.budget import compute_capacity

BENCH = REPO / "benchmarks" / "fit_accuracy.py"
#: a public start-up with its weights logged (Llama 3.1 8B on an A100 80GB, vLLM 0.31.0)
CASE_ID = "a100-80-llama31-8b-131k-v0310-default"


@pytest.fixture(scope="module")
def bench():
    return load_script(BENCH, "fit_accuracy_adapters")


def _replayed(bench, tmp_path, other_flags: str):
    cases = json.loads((bench.DATA / "calibration_cases_released.json").read_text())
    case = dict(next(c for c in cases if c["case_id"] == CASE_ID))
    case["other_flags"] = other_flags
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([case]))
    loaded, skipped = bench.load_cases([path])
    assert not skipped
    return loaded[0]


def test_flags_are_read_in_vllms_spelling(bench) -> None:
    flags = bench.adapter_flags({"other_flags": (
        "--enable-lora --max-loras 32 --max-lora-rank 16 --lora-dtype bfloat16 "
        """--speculative-config '{"method": "mtp", "num_speculative_tokens": 2, """
        """"draft": {"x": 1}}' --max-model-len 8192""")})
    assert flags == {
        "enable_lora": True, "max_loras": 32, "max_lora_rank": 16, "lora_dtype": "bfloat16",
        "speculative_config": '{"method": "mtp", "num_speculative_tokens": 2, '
                              '"draft": {"x": 1}}',
    }
    # a drafter named only in words is no flag
    assert bench.adapter_flags({"other_flags": "MTP speculative decoding on"}) == {}


def test_the_logged_size_already_holds_the_lora_stacks(bench, tmp_path) -> None:
    plain = _replayed(bench, tmp_path, "")
    lora = _replayed(bench, tmp_path, "--enable-lora --max-loras 32 --max-lora-rank 16")
    assert lora.inputs.enable_lora and lora.inputs.max_loras == 32
    cap = compute_capacity(lora.inputs)
    stacks = cap.inputs["lora_slot_bytes"]
    # 32 slots of rank 16 on Llama 3.1 8B: about 2.6 GiB of stacks
    assert 2.5 * GiB < stacks < 2.8 * GiB
    # the checkpoint the case is planned with is the logged size less the stacks, so the
    # weights term (checkpoint + stacks) is what vLLM logged, not the stacks twice
    assert plain.inputs.model.weights_bytes - lora.inputs.model.weights_bytes == stacks
    assert cap.weights_bytes == compute_capacity(plain.inputs).weights_bytes


def test_mtp_layers_in_the_logged_size_are_not_counted_twice(bench) -> None:
    """An MTP run logs the MTP layer with the model; a checkpoint read without its tensor list
    (the validation's) is sized without it, and the plan adds its 16-bit estimate once."""
    logged = int(50 * GiB)
    model = fixture_spec("qwen3.5-27b", weights_bytes=logged)
    assert model.mtp_layers == 1 and model.mtp_weights_bytes == 0
    flags = {"speculative_config": '{"method": "mtp", "num_speculative_tokens": 2}'}
    extra = bench.loaded_adapter_bytes(model, flags, 1, "0.29.0")
    assert extra == speculative.mtp_layer_bytes(model)
    assert bench.loaded_adapter_bytes(model, {}, 1, "0.29.0") == 0
    replayed = replace(model, weights_bytes=logged - extra)
    cap = compute_capacity(rtx4090(replayed, max_model_len=4096, gpu_total_bytes=80 * GiB,
                                   vllm_version="0.29.0", **flags))
    plain = compute_capacity(rtx4090(model, max_model_len=4096, gpu_total_bytes=80 * GiB,
                                     vllm_version="0.29.0"))
    assert cap.weights_bytes == plain.weights_bytes
