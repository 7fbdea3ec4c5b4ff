"""vLLM 0.34's extensible KV cache in the plan: the final KV follows the free memory at launch.

The rules are read from the 0.34.0 wheel (v1/worker/extensible_kv_cache.py
measure_kv_cache_bytes, v1/core/kv_cache_planning.py finalize_extensible_kv_cache,
config/cache.py resolved_gpu_memory_utilization and DEFAULT_BLOCK_SIZE); the GPU is the recorded
``rtx4090-desktop`` snapshot replayed through the NVML stand-in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvpilot.core.base import failures, versions
from kvpilot.core.base.units import GiB, MiB
from kvpilot.core.cli import main
from kvpilot.core.fit import extensible_kv

SNAPSHOT = Path(__file__).parents[3] / "resources" / "nvml_rtx4090-desktop.json"
MODEL = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    monkeypatch.delenv("KVPILOT_VLLM", raising=False)
    return tmp_path


def _snapshot_with_free(tmp_path: Path, more_free_bytes: int) -> Path:
    """The desktop snapshot with ``more_free_bytes`` moved from used to free (Firefox holding
    that much less), written where the NVML stand-in reads it."""
    data = json.loads(SNAPSHOT.read_text())
    dev = data["devices"][0]
    dev["memory"]["free"] += more_free_bytes
    dev["memory"]["used"] -= more_free_bytes
    for proc in dev["graphics_processes"]:
        if proc["pid"] == 3120:  # firefox
            proc["used_bytes"] -= min(more_free_bytes, proc["used_bytes"])
    path = tmp_path / f"desktop-plus-{more_free_bytes}.json"
    path.write_text(json.dumps(data))
    return path


def _plan(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], snapshot: str,
          *extra: str, as_json: bool = True) -> tuple[int, dict | str]:
    monkeypatch.setenv("KVPILOT_FAKE_NVML", snapshot)
    rc = main(["plan", "--model", MODEL, "--max-model-len", "8192", *extra]
              + (["--json"] if as_json else []))
    out = capsys.readouterr().out
    return rc, (json.loads(out) if as_json else out)


def test_measure_kv_cache_bytes_is_vllms_formula():
    # numbers chosen so that each branch of min() decides once (bytes)
    init_free, free, committed, peak = 20 * GiB, 5 * GiB, 1 * GiB, 2 * GiB
    # non_kv = 20 - 5 - 1 = 14; headroom = 6; margin = max(1, 1.5) = 1.5 GiB
    device = extensible_kv.measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=free, committed_bytes=committed,
        requested_bytes=24 * GiB, transient_peak_bytes=peak)
    assert device == int(6 * GiB - 1.5 * GiB) - 2 * GiB
    capped = extensible_kv.measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=free, committed_bytes=committed,
        requested_bytes=17 * GiB, transient_peak_bytes=peak)
    assert capped == (17 - 14) * GiB - 2 * GiB
    # the torch reservation growth replaces the peak when larger; never negative
    assert extensible_kv.measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=free, committed_bytes=committed,
        requested_bytes=24 * GiB, transient_peak_bytes=0,
        torch_reserve_growth_bytes=3 * GiB) == 6 * GiB - 1 * GiB - 3 * GiB
    assert extensible_kv.measure_kv_cache_bytes(
        init_free_bytes=init_free, free_bytes=0, committed_bytes=0,
        requested_bytes=24 * GiB, transient_peak_bytes=peak) == 0
    assert extensible_kv.margin_bytes(512 * MiB) == GiB
    assert extensible_kv.margin_bytes(4 * GiB) == 3 * GiB


def test_desktop_snapshot_plans_034_with_its_rules_and_no_newer_note(
        cli_env, monkeypatch, capsys):
    rc, text = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0",
                     as_json=False)
    assert isinstance(text, str)
    assert "newer than the newest release" not in text
    assert "extensible KV cache" in text
    assert "block 64 tokens" in text
    # each 0.34 term names the file and function of 0.34's code it comes from
    for source in ("measure_kv_cache_bytes", "finalize_extensible_kv_cache",
                   "resolved_gpu_memory_utilization", "KV_CACHE_MARGIN_FLOOR_BYTES",
                   "KV_CACHE_NON_TORCH_RESERVE_BYTES", "profile_cudagraph_memory",
                   "init_snapshot", "reserved_headroom_bytes"):
        assert source in text, source
    assert rc == 0 and "verdict         fits" in text


def test_034_kv_follows_free_memory(cli_env, monkeypatch, capsys):
    # at the utilization 0.34 resolves an unset one to (1.0), only free memory binds
    uncapped = ("--vllm-version", "0.34.0", "--gpu-memory-utilization", "1.0")
    _, base = _plan(monkeypatch, capsys, "rtx4090-desktop", *uncapped)
    _, more = _plan(monkeypatch, capsys, str(_snapshot_with_free(cli_env, 2 * GiB)), *uncapped)
    assert isinstance(base, dict) and isinstance(more, dict)
    assert base["block_size"] == 64 and base["gpu_memory_utilization"] == 1.0
    assert base["inputs"]["extensible_kv_cache"] is True
    grew = more["available_kv_bytes"] - base["available_kv_bytes"]
    assert grew == 2 * GiB  # 2 GiB more free, 2 GiB more KV (device-bound: nothing else moves)
    # the blocks follow: 2 GiB / (57,344 B/token x 64 tokens) = 585 blocks more
    assert more["num_blocks"] - base["num_blocks"] in (585, 586)
    terms = {t["name"]: t["bytes"] for t in base["terms"]}
    assert terms["kv_margin"] == GiB  # max(1 GiB, 0.75 x 0.69 GiB)
    # final KV = free at launch - weights - non-torch - graph pool - margin - peak
    assert base["available_kv_bytes"] == (
        terms["launch_free"] - terms["weights"] - terms["non_torch"] - terms["cudagraph"]
        - terms["kv_margin"] - terms["activation_peak"])
    # the 0.33 rules on the same GPU: 0.92 x total, 16-token blocks, the graph estimate
    vllm_default = ("--vllm-version", "0.33.0", "--gpu-memory-utilization", "0.92")
    _, old = _plan(monkeypatch, capsys, "rtx4090-desktop", *vllm_default)
    assert isinstance(old, dict)
    assert old["block_size"] == 16 and old["gpu_memory_utilization"] == 0.92
    _, old_more = _plan(monkeypatch, capsys, str(_snapshot_with_free(cli_env, 2 * GiB)),
                        *vllm_default)
    assert isinstance(old_more, dict)
    assert old_more["available_kv_bytes"] == old["available_kv_bytes"]  # free does not count


def test_plan_without_a_utilization_takes_the_launch_cap_serve_takes(
        cli_env, monkeypatch, capsys):
    _, plan = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0")
    assert isinstance(plan, dict)
    cap = extensible_kv.launch_cap(
        vllm_version="0.34.0", total_bytes=plan["inputs"]["gpu_total_bytes"],
        free_now_bytes=plan["inputs"]["gpu_free_bytes"], drives_display=True)
    assert cap.capped and plan["gpu_memory_utilization"] == cap.gpu_memory_utilization
    assert plan["utilization_choice"]["automatic"] is True
    assert "stays free for them" in plan["utilization_choice"]["reason"]


def test_034_has_no_free_memory_startup_failure(cli_env, monkeypatch, capsys):
    # 0.33 refuses this desktop at 0.92 (22.15 GiB free < 21.76 GiB + context); 0.34 starts
    rc_old, old = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.33.0",
                        "--gpu-memory-utilization", "0.92")
    rc_new, new = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0",
                        "--gpu-memory-utilization", "0.95")
    assert isinstance(old, dict) and isinstance(new, dict)
    assert old["failure"]["kind"] == failures.FREE_MEMORY_BELOW_UTILIZATION and rc_old == 1
    assert new["failure"] is None and rc_new == 0
    # 0.95 x 23.65 GiB is above the 21.65 GiB free at launch: the device binds, as at the 1.0
    # an unset utilization resolves to
    _, unset = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0",
                     "--gpu-memory-utilization", "1.0")
    assert isinstance(unset, dict)
    assert new["available_kv_bytes"] == unset["available_kv_bytes"]
    # a cap under the free memory binds instead and says what it withholds
    _, capped = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0",
                      "--gpu-memory-utilization", "0.85")
    assert isinstance(capped, dict)
    note = next(t["note"] for t in capped["terms"] if t["name"] == "kv_cache")
    assert "withholding" in note
    assert capped["available_kv_bytes"] == (
        capped["requested_bytes"] - capped["weights_bytes"] - capped["non_torch_bytes"]
        - capped["cudagraph_bytes"] - capped["activation_peak_bytes"])


def test_034_does_not_fit_when_weights_peak_and_margin_exceed_free(
        cli_env, monkeypatch, capsys):
    rc, out = _plan(monkeypatch, capsys, str(_snapshot_with_free(cli_env, -7 * GiB)),
                    "--vllm-version", "0.34.0")
    assert isinstance(out, dict)
    assert rc == 1 and out["verdict"] == "does_not_fit"
    assert out["failure"]["kind"] == failures.NO_KV_MEMORY
    assert "margin" in out["failure"]["message"]


def test_kv_cache_memory_bytes_turns_the_extension_off(cli_env, monkeypatch, capsys):
    _, out = _plan(monkeypatch, capsys, "rtx4090-desktop", "--vllm-version", "0.34.0",
                   "--kv-cache-memory-bytes", str(4 * GiB))
    assert isinstance(out, dict)
    assert out["inputs"]["extensible_kv_cache"] is False
    assert "kv-cache-memory-bytes" in out["inputs"]["extensible_kv_off_reason"]
    assert out["available_kv_bytes"] == 4 * GiB
    assert out["gpu_memory_utilization"] == 0.92  # DEFAULT_GPU_MEMORY_UTILIZATION
    assert out["block_size"] == 64  # the block default does not depend on the extension


def test_extension_switches_follow_resolve_extensible_kv_cache():
    assert extensible_kv.extension_off_reason("0.34.0") is None
    assert extensible_kv.extension_off_reason("0.35.1") is None
    assert extensible_kv.extension_off_reason("0.33.0") is not None
    assert "CUDA" in (extensible_kv.extension_off_reason("0.34.0", is_cpu=True) or "")
    assert extensible_kv.extension_off_reason("0.34.0", num_gpu_blocks_override=100)
    assert extensible_kv.extension_off_reason("0.34.0", kv_connector="LMCacheConnectorV1")
    assert extensible_kv.extension_off_reason("0.34.0", vmm_supported=False)
    assert versions.default_utilization("0.34.0", extensible=True) == 1.0
    assert versions.default_utilization("0.34.0") == 0.92
    assert versions.default_utilization("0.33.0", extensible=True) == 0.92
    assert versions.default_block_size("0.34.0") == 64
    assert versions.default_block_size("0.33.0") == 16
    assert versions.support_note("0.34.0") is None
    assert versions.support_note("0.35.0") is not None


def test_hybrid_block_alignment_moves_with_the_64_token_default():
    from fitkit import fixture_spec

    from kvpilot.core.fit import kv

    # the attention block of a hybrid is a multiple of max(16, block_size)
    # (platforms/interface.py _align_hybrid_block_size): 64 from 0.34
    for name in ("qwen3.5-27b", "nemotron-3-nano-30b-a3b"):
        model = fixture_spec(name)
        old = kv.kv_layout(model, block_size=versions.default_block_size("0.33.0"))
        new = kv.kv_layout(model, block_size=versions.default_block_size("0.34.0"))
        assert old.block_size % 16 == 0 and new.block_size % 64 == 0, name
        assert new.block_size >= old.block_size, name


def test_fallbacks_do_not_offer_raising_a_utilization_already_at_one():
    from fitkit import fixture_spec, rtx4090

    from kvpilot.core.base.failures import Failure
    from kvpilot.core.fit import fallback

    model = fixture_spec("qwen2.5-7b-instruct", weights_bytes=15_231_233_024)
    failure = Failure(failures.KV_CACHE_TOO_SMALL, "too small", estimated_max_model_len=20000)
    unset = rtx4090(model, vllm_version="0.34.0", max_model_len=131072, max_num_seqs=4,
                    gpu_free_bytes=22 * GiB)
    kinds = {o.kind for o in fallback.propose(failure, unset)}
    assert fallback.UTILIZATION not in kinds and fallback.SHORTER_CONTEXT in kinds
    # a cap below 1.0 (the desktop's) may be lifted: back to vLLM's default
    capped = rtx4090(model, vllm_version="0.34.0", max_model_len=131072, max_num_seqs=4,
                     gpu_free_bytes=22 * GiB, gpu_memory_utilization=0.8)
    lifted = [o for o in fallback.propose(failure, capped) if o.kind == fallback.UTILIZATION]
    assert lifted and lifted[0].inputs.gpu_memory_utilization is None
    # 0.33 still offers the largest utilization that passes its start-up check
    old = rtx4090(model, vllm_version="0.33.0", max_model_len=131072, max_num_seqs=4,
                  gpu_free_bytes=22 * GiB, gpu_memory_utilization=0.8)
    assert fallback.UTILIZATION in {o.kind for o in fallback.propose(failure, old)}


def test_a_measured_034_launch_moves_with_the_free_memory():
    from fitkit import fixture_spec, rtx4090

    from kvpilot.core.base.plan import FROM_MEASURED
    from kvpilot.core.fit.budget_now import CUDA_CONTEXT_BYTES
    from kvpilot.core.fit.calibrate import calibrated_capacity, key_for
    from kvpilot.core.fit.measurements import Measured, MeasurementRecord

    model = fixture_spec("qwen2.5-7b-instruct", weights_bytes=15_231_233_024)
    at_launch = rtx4090(model, vllm_version="0.34.0", max_model_len=8192,
                        gpu_free_bytes=22 * GiB)
    # what the launch reported: "Free memory on device (21.5/... GiB) on startup", final KV
    measured = Measured(measured_at="2026-12-06T10:41:00+00:00", source="launch",
                        available_kv_bytes=round(4.91 * GiB), kv_cache_tokens=92_140,
                        free_at_startup_bytes=22 * GiB - CUDA_CONTEXT_BYTES)
    record = MeasurementRecord(key_for(at_launch), measured)
    same = calibrated_capacity(at_launch, [record])
    assert same.available_kv_bytes == round(4.91 * GiB)
    assert same.inputs["kv_source"] == FROM_MEASURED
    more_free = calibrated_capacity(
        rtx4090(model, vllm_version="0.34.0", max_model_len=8192, gpu_free_bytes=24 * GiB),
        [record])
    assert more_free.available_kv_bytes == round(4.91 * GiB) + 2 * GiB
    assert "free memory now" in more_free.inputs["kv_source_note"]
    # 0.33 sizes from the utilization: a measurement stays as it was
    old_inputs = rtx4090(model, vllm_version="0.33.0", max_model_len=8192,
                         gpu_free_bytes=22 * GiB, gpu_memory_utilization=0.85)
    old = MeasurementRecord(key_for(old_inputs), measured)
    assert calibrated_capacity(
        rtx4090(model, vllm_version="0.33.0", max_model_len=8192, gpu_free_bytes=24 * GiB,
                gpu_memory_utilization=0.85), [old]).available_kv_bytes == round(4.91 * GiB)
