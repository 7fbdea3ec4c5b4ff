"""A fallback never suggests a flag the plan's vLLM release does not have (versions.FEATURES)."""

from __future__ import annotations

import pytest
from fitkit import rtx4090

from kvpilot.core.base import failures
from kvpilot.core.base.failures import Failure
from kvpilot.core.base.model_spec import ModelSpec
from kvpilot.core.base.versions import FEATURES, Release, supports
from kvpilot.core.fit import fallback
from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail

#: every release where a flag row starts or ends, and the ones either side of them
_RELEASES = sorted(
    {v for f in FEATURES.values() if f.flag for v in (f.since, f.until, f.back_in) if v}
    | {"0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.12.0", "0.12.9", "0.13.0", "0.33.0"}
    - {"0.0.0"}
)

_FLAG_ROWS = {f.flag: f for f in FEATURES.values() if f.flag}

_FAILURES = (
    Failure(failures.CUDA_OOM_GRAPHS, "out of memory while capturing CUDA graphs"),
    Failure(failures.KV_CACHE_TOO_SMALL, "the KV cache is too small"),
    Failure(failures.CUDA_OOM_LOADING, "out of memory while loading"),
)


@pytest.mark.parametrize("version", _RELEASES)
def test_no_fallback_suggests_a_flag_its_release_lacks(qwen7b: ModelSpec, version: str) -> None:
    inputs = rtx4090(qwen7b, max_model_len=32768, max_num_seqs=64, vllm_version=version)
    seen = 0
    for failure in _FAILURES:
        for option in fallback.propose(failure, inputs):
            argv = build_argv_tail(LaunchSpec.from_plan(option.inputs, "/m"))
            for token in argv:
                row = _FLAG_ROWS.get(token.split("=", 1)[0])
                if row is not None:
                    seen += 1
                    assert supports(row.name, version), (option.kind, token, version)
            for flag, row in _FLAG_ROWS.items():
                if flag in option.label:
                    assert supports(row.name, version), (option.label, version)
    if Release.parse(version).at_least("0.9.0"):  # a graph OOM offers a capture-size flag
        assert seen
