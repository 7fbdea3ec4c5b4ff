"""``kvpilot gpu`` end to end through the CLI entry point, against replayed snapshots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import pynvml_stub

from kvpilot.core.cli import main
from kvpilot.core.hardware import nvml as nvml_mod


def test_text_report_4090_desktop(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA GeForce RTX 4090" in out
    assert "compute capability 8.9" in out
    assert "firefox" in out and "Xorg" in out
    assert "other processes hold 1.5 GiB: at most gpu_memory_utilization 0.91 will start" in out
    assert "FP8 KV cache yes" in out
    assert "replay of rtx4090-desktop" in out
    assert "Hugging Face cache" in out
    assert "throttle    not throttled (reasons 0x1: idle)" in out


def test_throttle_reasons_in_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(pynvml_stub.DATA_DIR / "throttling.json")
    assert main(["gpu", "--fake-nvml", path]) == 0
    assert "throttle    throttled: power cap (reasons 0x4: power cap)" in capsys.readouterr().out
    assert main(["gpu", "--json", "--fake-nvml", path]) == 0
    (gpu,) = json.loads(capsys.readouterr().out)["gpus"]
    assert gpu["throttle_reasons_mask"] == 4 and gpu["throttle_reasons"] == ["power cap"]
    assert gpu["throttled"] is True
    assert gpu["energy_mj"] == 10_368_000_000 and gpu["power_limit_w"] == 450.0
    assert main(["gpu", "--json", "--fake-nvml", "rtx3090-idle"]) == 0
    (idle,) = json.loads(capsys.readouterr().out)["gpus"]
    assert idle["throttle_reasons"] is None and idle["throttled"] is None
    assert idle["energy_mj"] is None


def test_text_report_wsl2_says_not_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--fake-nvml", "rtx4090-wsl2"]) == 0
    out = capsys.readouterr().out
    assert "not reported" in out
    assert "not visible from this system" in out


def test_json_report(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert (
        main(["gpu", "--json", "--fake-nvml", "rtx4090-desktop", "--model-dir", str(tmp_path)]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["error"] is None
    (gpu,) = data["gpus"]
    assert gpu["memory_total_bytes"] == 24564 * 1024**2
    assert gpu["compute_capability"] == [8, 9]
    assert gpu["launch_budget"]["max_utilization"] == 0.91
    assert gpu["spec"]["short_name"] == "RTX 4090" and gpu["spec"]["fp8_kv_supported"] is True
    assert {p["name"] for p in gpu["processes"]} == {"Xorg", "gnome-shell", "firefox"}
    assert data["system"]["model_dir"] == str(tmp_path)
    assert data["system"]["model_dir_free_bytes"] > 0


def test_json_wsl2_used_bytes_are_null_not_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--json", "--fake-nvml", "rtx4090-wsl2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["used_bytes"] for p in data["gpus"][0]["processes"]] == [None, None]
    assert data["gpus"][0]["process_memory_reported"] is False


def test_no_driver_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--fake-nvml", "no-driver"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("kvpilot: error: no NVIDIA driver found")
    assert "install the NVIDIA driver" in lines[0]


def test_no_driver_json_carries_the_problem(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--json", "--fake-nvml", "no-driver"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["gpus"] == []
    assert data["error"]["kind"] == "library_not_found"
    assert data["system"]["ram_total_bytes"] > 0


def test_env_variable_selects_the_replay(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(nvml_mod.FAKE_ENV, "rtx5090")
    assert main(["gpu"]) == 0
    assert "NVIDIA GeForce RTX 5090" in capsys.readouterr().out


def test_snapshot_file_path(capsys: pytest.CaptureFixture[str]) -> None:
    path = pynvml_stub.DATA_DIR / "two-gpus.json"
    assert main(["gpu", "--fake-nvml", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GPU 0  NVIDIA GeForce RTX 4090" in out and "GPU 1  NVIDIA GeForce RTX 3090" in out


def test_lost_gpu_and_unsupported_fields_are_shown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a GPU lost mid-probe is an injected fault, not a recording: the test double loads the file
    monkeypatch.setattr(nvml_mod, "load_recorded", pynvml_stub.load_file)
    assert main(["gpu", "--fake-nvml", str(pynvml_stub.DATA_DIR / "notsupported.json")]) == 0
    out = capsys.readouterr().out
    assert "power n/a" in out
    assert "not reported by this GPU/driver:" in out and "temperature" in out
    data = json.loads((pynvml_stub.DATA_DIR / "two-gpus.json").read_text())
    data["devices"][1]["lost_after_calls"] = 3
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(data))
    assert main(["gpu", "--fake-nvml", str(path)]) == 0
    out = capsys.readouterr().out
    assert "GPU 1  NVIDIA GeForce RTX 3090: stopped answering" in out
    assert "warning: GPU 1 stopped answering" in out


def test_margin_option_changes_the_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop", "--margin-mib", "0"]) == 0
    assert "at most gpu_memory_utilization 0.93" in capsys.readouterr().out
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop", "--margin-mib", "-5"]) == 2
    assert "--margin-mib must not be negative" in capsys.readouterr().err


def test_unknown_snapshot_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gpu", "--fake-nvml", "rtx9999"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU snapshot 'rtx9999'" in err and "rtx4090-desktop" in err


def test_fake_option_is_hidden_from_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["gpu", "--help"])
    out = capsys.readouterr().out
    assert "--json" in out and "--fake-nvml" not in out


def test_this_machine_without_driver(capsys: pytest.CaptureFixture[str]) -> None:
    """On a machine without an NVIDIA driver the real path gives the same one-line error."""
    from kvpilot.core.hardware.probe import probe

    if probe().ok:
        pytest.skip("an NVIDIA driver is present here; tests/gpu covers the real library")
    assert main(["gpu"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_from_034_the_launch_line_is_the_cap_not_the_start_up_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop", "--vllm-version", "0.33.0"]) == 0
    old = capsys.readouterr().out
    assert "at most gpu_memory_utilization 0.91 will start" in old
    assert main(["gpu", "--fake-nvml", "rtx4090-desktop", "--vllm-version", "0.34.0"]) == 0
    new = capsys.readouterr().out
    assert "will start" not in new and "makes no start-up check" in new
    assert "--gpu-memory-utilization 0.83" in new  # room for the desktop to grow
    assert main(["gpu", "--json", "--fake-nvml", "rtx4090-desktop",
                 "--vllm-version", "0.34.0"]) == 0
    cap = json.loads(capsys.readouterr().out)["gpus"][0]["launch_cap"]
    assert cap["gpu_memory_utilization"] == 0.83 and cap["headroom_bytes"] > 0
    # a GPU nothing else uses keeps vLLM's own default (no cap)
    assert main(["gpu", "--json", "--fake-nvml", "rtx3090-idle", "--vllm-version", "0.34.0"]) == 0
    idle = json.loads(capsys.readouterr().out)["gpus"][0]["launch_cap"]
    assert idle["gpu_memory_utilization"] is None
