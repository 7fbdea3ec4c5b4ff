"""Measure, the dry run both faces call: its expected time, and the launch it starts (dummy
weights, a free port from the one the launch names, the plan's own launch when the face gives
none). The dry run itself, from both faces, is in
tests/gui/test_services_decide_alike_measure.py."""

from __future__ import annotations

import socket
from dataclasses import replace
from pathlib import Path

from fitkit import rtx4090

from kvpilot.core.app.measure import (
    TYPICAL_DRY_RUN_S,
    MeasureRequest,
    dry_run_spec,
    expected_dry_run_s,
    newest_startup_s,
)
from kvpilot.core.fit.calibrate import key_for
from kvpilot.core.fit.measurements import Measured, MeasurementStore
from kvpilot.core.hub.identity import launch_reference
from kvpilot.core.runtimes.discovery import VllmRuntime
from kvpilot.core.vllm.command import LaunchSpec


def _measured(at: str, startup_s: float | None) -> Measured:
    return Measured(available_kv_bytes=2 << 30, kv_cache_tokens=37_000, measured_at=at,
                    source="dry_run", startup_s=startup_s)


def test_without_an_earlier_start_up_the_typical_time_is_expected(qwen7b, tmp_path: Path) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192)
    store = MeasurementStore(tmp_path / "measurements.json")
    low, high, basis = expected_dry_run_s(inputs, store)
    assert (low, high) == TYPICAL_DRY_RUN_S and "no earlier start-up" in basis
    assert expected_dry_run_s(inputs, None)[:2] == TYPICAL_DRY_RUN_S


def test_the_newest_start_up_of_this_model_on_this_gpu_is_expected(qwen7b, tmp_path: Path) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192)
    store = MeasurementStore(tmp_path / "measurements.json")
    store.record(key_for(inputs), _measured("2026-11-01T00:00:00+00:00", 80.0))
    # another setting of the same model, measured later: its start-up is the newest
    other = replace(inputs, max_model_len=4096)
    store.record(key_for(other), _measured("2026-11-20T00:00:00+00:00", 100.0))
    assert newest_startup_s(inputs, store) == 100.0
    assert expected_dry_run_s(inputs, store) == (100.0, 125.0, "its last start-up on this GPU")


def _runtime() -> VllmRuntime:
    return VllmRuntime(argv_prefix=("vllm",), version="0.11.0", source="path", location="vllm")


def test_the_dry_run_uses_dummy_weights_on_a_free_port(qwen7b, tmp_path: Path) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        given = LaunchSpec.from_plan(inputs, "Qwen/Qwen2.5-7B-Instruct", port=port,
                                     api_key="secret")
        spec = dry_run_spec(MeasureRequest(_runtime(), inputs, tmp_path, given))
    assert spec.load_format == "dummy" and spec.port != port
    assert replace(spec, load_format=None, port=port) == given  # the face's launch otherwise


def test_without_a_launch_the_plans_own_is_measured(qwen7b, tmp_path: Path) -> None:
    inputs = rtx4090(qwen7b, max_model_len=8192)
    spec = dry_run_spec(MeasureRequest(_runtime(), inputs, tmp_path))
    own = LaunchSpec.from_plan(inputs, launch_reference(qwen7b))
    assert replace(spec, load_format=None, port=own.port) == own
