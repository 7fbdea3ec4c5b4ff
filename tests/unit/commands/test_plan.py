"""The `kvpilot plan` / `kvpilot recommend` contracts (JSON fields, exit codes, one-line errors)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from testpaths import DATA

from kvpilot.core.cli import main

MODELS = DATA / "models"


pytestmark = pytest.mark.usefixtures("isolated_cli")


def _model_dir(tmp_path: Path) -> Path:
    import shutil

    model = tmp_path / "qwen"
    shutil.copytree(MODELS / "qwen2.5-7b-instruct", model)
    (model / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 15_231_233_024}, "weight_map": {}})
    )
    return model


def test_plan_json_has_every_contract_field(tmp_path, capsys):
    rc = main(["plan", "--model", str(_model_dir(tmp_path)), "--gpu-total-mib", "24564",
               "--max-model-len", "32768", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    for key in ("weights_bytes", "non_torch_bytes", "activation_peak_bytes", "cudagraph_bytes",
                "requested_bytes", "available_kv_bytes", "kv_bytes_per_token",
                "kv_cache_tokens", "max_concurrency", "fits", "failure", "inputs"):
        assert key in out, key
    # the checkpoint bytes and the 8 MiB RoPE table (32,768 positions x 128 x 2 bytes)
    assert out["weights_bytes"] == 15_231_233_024 + 32_768 * 128 * 2
    assert out["kv_bytes_per_token"] == 57_344
    assert out["fits"] is True and out["failure"] is None
    assert out["inputs"]["max_model_len"] == 32768
    assert out["verdict"] == "fits"
    low, high = out["available_kv_band_bytes"]
    assert low < out["available_kv_bytes"] < high


def test_plan_failure_is_in_vllms_terms_and_exits_1(tmp_path, capsys):
    rc = main(["plan", "--model", str(_model_dir(tmp_path)), "--gpu-total-mib", "16376",
               "--max-model-len", "131072", "--max-num-seqs", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["fits"] is False
    assert out["failure"]["kind"] in ("kv_cache_too_small", "max_model_len_above_model")
    assert out["verdict"] == "does_not_fit"


def test_plan_text_table_names_each_term(tmp_path, capsys):
    main(["plan", "--model", str(_model_dir(tmp_path)), "--gpu", "RTX 4090"])
    text = capsys.readouterr().out
    for word in ("requested", "weights", "non_torch", "activation_peak", "cudagraph",
                 "kv_cache", "verdict", "KV band", "fitted"):
        assert word in text


def test_plan_of_a_newer_vllm_says_which_rules_it_uses(tmp_path, capsys):
    from kvpilot.core.base import versions
    from kvpilot.core.fit.activation import PROFILES, profile_for

    model = str(_model_dir(tmp_path))
    main(["plan", "--model", model, "--gpu", "RTX 4090", "--vllm-version", "0.41.0"])
    text = capsys.readouterr().out
    newest = versions.short(versions.SUPPORTED_MAX)
    assert f"vLLM 0.41.0 is newer than the newest release kvpilot knows ({newest})" in text
    assert profile_for("0.41.0") is profile_for(versions.SUPPORTED_MAX) is PROFILES[0]
    main(["plan", "--model", model, "--gpu", "RTX 4090", "--vllm-version", versions.SUPPORTED_MAX])
    assert "newer than the newest release" not in capsys.readouterr().out
    # with no release named the planner assumes NEWEST_KNOWN (0.33): 0.34's KV follows the
    # free memory at launch, so it is planned only when named or installed
    from kvpilot.core.base.plan import PlanInputs
    from kvpilot.core.commands.plan import DEFAULT_VLLM_VERSION

    assert DEFAULT_VLLM_VERSION == versions.NEWEST_KNOWN
    assert PlanInputs.__dataclass_fields__["vllm_version"].default == versions.NEWEST_KNOWN
    assert versions.at_least(versions.SUPPORTED_MAX, versions.NEWEST_KNOWN)
    oldest = profile_for(versions.SUPPORTED_MIN)
    assert oldest.engine == "V0" and oldest is PROFILES[-1]


def test_catalog_id_plans_without_files(capsys):
    rc = main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu", "RTX 4090",
               "--max-model-len", "16384", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fits"]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["plan", "--model", "/no/such/dir", "--gpu-total-mib", "24564"], "no/such/dir"),
        (["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "GTX 9999"], "unknown GPU"),
        (["plan", "--model", "Qwen/Qwen2.5-7B-Instruct"], "--gpu-total-mib"),
        (["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "RTX 4090",
          "--max-num-seqs", "0"], "--max-num-seqs must be at least 1"),
        (["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "RTX 4090",
          "--gpu-memory-utilization", "1.4"], "gpu_memory_utilization"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_broken_config_json_names_the_file_in_a_real_process(tmp_path):
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.core.cli", "plan", "--model", str(model),
         "--gpu-total-mib", "24564"], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "config.json" in proc.stderr and "Traceback" not in proc.stderr


def test_recommend_json_ranks_candidates(capsys):
    rc = main(["recommend", "--gpu", "RTX 4090", "--gpu-free-mib", "22900", "--context",
               "16384", "--users", "4", "--json", "--limit", "5"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert 1 <= len(out["candidates"]) <= 5
    assert [c["rank"] for c in out["candidates"]] == list(range(1, len(out["candidates"]) + 1))
    assert all(c["max_concurrency"] >= 4 for c in out["candidates"])
    assert out["rejected"]


#: the ``kvpilot recommend --json`` keys scripts read (more may be added, none removed)
RECOMMEND_KEYS = {"gpu", "goal", "candidates", "rejected"}
CANDIDATE_KEYS = {
    "rank", "model", "quantization", "weight_bits", "max_model_len", "max_num_seqs",
    "kv_cache_dtype", "gpu_memory_utilization", "kv_cache_tokens", "max_concurrency",
    "headroom_bytes", "kv_headroom_bytes", "tight", "decode_tokens_per_s", "ttft_s", "score",
    "quality", "reason", "gpus", "gpu_positions", "tensor_parallel_size",
    "pipeline_parallel_size", "parallel_note", "budget",
}


def test_recommend_model_folder_ranks_that_model(capsys, tmp_path):
    model = _model_dir(tmp_path)
    rc = main(["recommend", "--gpu", "RTX 4090", "--gpu-free-mib", "22900", "--context", "8192",
               "--users", "2", "--json", "--model", str(model)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert set(out) >= RECOMMEND_KEYS and set(out["candidates"][0]) >= CANDIDATE_KEYS
    assert [c["model"] for c in out["candidates"]] == [str(model)]
    assert out["rejected"] == []


def test_recommend_model_folder_without_config_json_is_one_sentence(capsys, tmp_path):
    (tmp_path / "weights").mkdir()
    rc = main(["recommend", "--gpu", "RTX 4090", "--model", str(tmp_path / "weights")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no config.json here" in err and len(err.strip().splitlines()) == 1


def test_recommend_reads_a_context_as_the_planner_does(capsys):
    """``--context 16k`` is 16,384 tokens (the planner's "16k"); a wrong one is one line."""
    args = ["recommend", "--gpu", "RTX 4090", "--gpu-free-mib", "22900", "--users", "4",
            "--json", "--limit", "3"]
    assert main([*args, "--context", "16k"]) == 0
    short = json.loads(capsys.readouterr().out)
    assert main([*args, "--context", "16384"]) == 0
    assert short == json.loads(capsys.readouterr().out)
    assert short["goal"]["context"] == 16384
    with pytest.raises(SystemExit) as exc:
        main([*args, "--context", "lots"])
    assert exc.value.code == 2
    assert "context 'lots' is not a number of tokens" in capsys.readouterr().err


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("kvpilot ")


def test_plan_defaults_to_this_machines_gpu_and_names_what_to_close(monkeypatch, capsys):
    """A desktop on the card (Xorg, gnome-shell, Firefox hold 1.5 GiB): the plan reads NVML's
    free memory, refuses a utilization that would not start, and names the programs."""
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    rc = main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--max-model-len", "8192",
               "--gpu-memory-utilization", "0.97", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["inputs"]["gpu_name"] == "NVIDIA GeForce RTX 4090"
    assert out["inputs"]["gpu_free_bytes"] == 23_783_800_832
    assert out["failure"]["kind"] == "free_memory_below_utilization"
    message = out["failure"]["message"]
    assert "firefox (0.8 GiB), Xorg (0.4 GiB), gnome-shell (0.3 GiB)" in message
    # vLLM's check: free >= utilization x CUDA's total (23.65 GiB, not NVML's 23.99)
    assert "22.15 of 23.65 GiB are free" in message
    assert "at most --gpu-memory-utilization 0.91 would start" in message
    assert out["inputs"]["gpu_total_bytes"] == (24564 - 346) * 2**20


def test_plan_without_a_gpu_plans_for_the_cpu_build(capsys):
    import psutil

    # float32 KV (--dtype float32): 28 layers x 2 x 4 heads x 128 x 4 bytes = 112 KiB a token
    rc = main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--max-model-len", "1024",
               "--kv-cache-memory-bytes", "128M", "--vllm-version", "0.32.0+cpu",
               "--dtype", "float32", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["inputs"]["gpu_name"] == "cpu"
    assert out["inputs"]["gpu_total_bytes"] == psutil.virtual_memory().total
    assert out["available_kv_bytes"] == 128 << 20
    assert out["kv_bytes_per_token"] == 28 * 2 * 4 * 128 * 4
    assert out["max_num_seqs"] == 128 and out["max_num_batched_tokens"] == 2048


def test_plan_without_a_gpu_or_cpu_build_asks_for_a_gpu(capsys):
    assert main(["plan", "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ",
                 "--vllm-version", "0.32.0"]) == 2
    err = capsys.readouterr().err
    assert "no NVIDIA GPU found" in err and "--gpu" in err


SERVING_FLAGS = ["--gpu-memory-utilization", "0.9", "--max-num-batched-tokens", "2048",
                 "--kv-cache-dtype", "fp8", "--kv-cache-memory-bytes", "1G", "--quantization",
                 "awq_marlin", "--tensor-parallel-size", "1", "--enforce-eager",
                 "--no-enable-prefix-caching", "--dtype", "float16", "--block-size", "16"]


@pytest.mark.parametrize("command", ["plan", "recommend", "serve"])
def test_plan_recommend_and_serve_take_the_same_serving_flags(command):
    from kvpilot.core.cli import build_parser
    from kvpilot.core.commands.serving_args import settings_from_args

    argv = [command, *SERVING_FLAGS]
    if command != "recommend":
        argv += ["--model", "m", "--max-model-len", "4096", "--max-num-seqs", "2"]
    args = build_parser(command).parse_args(argv)
    settings = settings_from_args(args)
    assert settings.dtype == "float16" and settings.enable_prefix_caching is False
    assert settings.kv_cache_memory_bytes == 1 << 30 and settings.block_size == 16
    assert settings.kv_cache_dtype == "fp8" and settings.enforce_eager
    if command != "recommend":
        assert (settings.max_model_len, settings.max_num_seqs) == (4096, 2)


def test_recommend_keeps_a_fixed_serving_flag_in_every_candidate(capsys):
    rc = main(["recommend", "--gpu", "RTX 4090", "--gpu-free-mib", "22900", "--context",
               "8192", "--users", "2", "--enforce-eager", "--kv-cache-dtype", "fp8", "--json",
               "--limit", "5"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["candidates"]
    for c in out["candidates"]:
        assert c["kv_cache_dtype"] == "fp8"
        assert c["budget"]["inputs"]["enforce_eager"] is True
        assert c["budget"]["cudagraph_bytes"] == 0


def test_plan_under_wsl2_lowers_the_band_by_what_windows_holds(tmp_path, capsys, monkeypatch):
    # the WSL2 replay: Windows' WDDM driver reports no per-process memory, 2,040,528,896 bytes
    # are used; vLLM 0.15.1 may count memory Windows makes resident while it loads as its own
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-wsl2")
    model = str(_model_dir(tmp_path))
    main(["plan", "--model", model, "--vllm-version", "0.15.1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["wsl2_residency_bytes"] == 2_040_528_896
    low, high = out["available_kv_band_bytes"]
    assert out["available_kv_bytes"] - low > 2_040_528_896 > high - out["available_kv_bytes"]
    main(["plan", "--model", model, "--vllm-version", "0.15.1"])
    assert "1.90 GiB lower for Windows' memory under WSL2" in capsys.readouterr().out
    from kvpilot.core.hardware.target import current_platform

    if current_platform() == "wsl2":
        return  # this host is WSL2 itself: every plan here allows for Windows
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-desktop")
    main(["plan", "--model", model, "--vllm-version", "0.15.1", "--json"])
    assert "wsl2_residency_bytes" not in json.loads(capsys.readouterr().out)["inputs"]
