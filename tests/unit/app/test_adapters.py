"""The planner's adapter inputs as serving settings and back: LoRA slots at a rank, a drafter
with its tokens, a drafter the inputs do not offer kept as it is, and a bad drafter refused."""

from __future__ import annotations

import json

import pytest

from kvpilot.core.app.adapters import adapter_settings, planner_adapters
from kvpilot.core.base.errors import FitError
from kvpilot.core.base.plan import DEFAULT_MAX_LORA_RANK, ServingSettings


def test_inputs_to_settings_and_back() -> None:
    values = adapter_settings(lora_slots=2, lora_rank=32, speculative_method="ngram",
                              speculative_tokens=3)
    assert (values["enable_lora"], values["max_loras"], values["max_lora_rank"]) == (True, 2, 32)
    assert json.loads(values["speculative_config"]) == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    shown = planner_adapters(ServingSettings(**values))
    assert (shown.lora_slots, shown.lora_rank) == (2, 32)
    assert (shown.speculative_method, shown.speculative_tokens) == ("ngram", 3)
    assert shown.other_speculative_config is None


def test_off_other_drafters_and_bad_input() -> None:
    assert adapter_settings() == {}
    off = planner_adapters(ServingSettings())
    assert (off.lora_slots, off.lora_rank, off.speculative_method) == (0, DEFAULT_MAX_LORA_RANK, "")
    eagle = json.dumps({"method": "eagle3", "model": "org/drafter", "num_speculative_tokens": 2})
    assert planner_adapters(ServingSettings(speculative_config=eagle)).other_speculative_config \
        == eagle
    with pytest.raises(FitError, match="speculative method must be one of ngram, mtp"):
        adapter_settings(speculative_method="medusa")
    with pytest.raises(FitError, match="draft tokens must be at least 1"):
        adapter_settings(speculative_method="mtp", speculative_tokens=0)
