"""The `kvpilot plan` / `kvpilot recommend` contracts (JSON fields, exit codes, one-line errors)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvpilot.core.cli import main

MODELS = Path(__file__).resolve().parents[2] / "data" / "models"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))


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
    assert out["weights_bytes"] == 15_231_233_024
    assert out["kv_bytes_per_token"] == 57_344
    assert out["fits"] is True and out["failure"] is None
    assert out["inputs"]["max_model_len"] == 32768


def test_plan_failure_is_in_vllms_terms_and_exits_1(tmp_path, capsys):
    rc = main(["plan", "--model", str(_model_dir(tmp_path)), "--gpu-total-mib", "16376",
               "--max-model-len", "131072", "--max-num-seqs", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["fits"] is False
    assert out["failure"]["kind"] in ("kv_cache_too_small", "max_model_len_above_model")


def test_plan_text_table_names_each_term(tmp_path, capsys):
    main(["plan", "--model", str(_model_dir(tmp_path)), "--gpu", "RTX 4090"])
    text = capsys.readouterr().out
    for word in ("requested", "weights", "non_torch", "activation_peak", "cudagraph",
                 "kv_cache", "verdict"):
        assert word in text


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


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("kvpilot ")
