"""The draft model a --speculative-config names, read offline (kvpilot.core.hub.draft)."""

from __future__ import annotations

import json

from fitkit import MODELS

from kvpilot.core.hub import draft


def test_the_reference_is_the_configs_model():
    assert draft.draft_reference(json.dumps({"model": " org/eagle3 ", "method": "eagle3"})) \
        == "org/eagle3"
    assert draft.draft_reference(json.dumps({"model": "[ngram]"})) is None
    assert draft.draft_reference(json.dumps({"method": "mtp"})) is None
    assert draft.draft_reference("{oops") is None
    assert draft.draft_reference(None) is None


def test_a_local_draft_is_read_and_a_missing_one_gives_none(tmp_path):
    spec = draft.draft_spec(json.dumps({"model": str(MODELS / "qwen3-8b"),
                                        "num_speculative_tokens": 3}))
    assert spec is not None and spec.num_hidden_layers == 36
    assert draft.draft_spec(json.dumps({"model": str(tmp_path / "absent"),
                                        "num_speculative_tokens": 3})) is None
