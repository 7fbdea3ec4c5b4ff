"""How close the plan comes to vLLM on the public start-ups of vision-language checkpoints.

Each case of ``calibration_cases*.json`` whose model is a vision-language checkpoint is planned
from that model's published ``config.json`` (the copies in ``tests/data/models``, with the
case's quantization and, where the checkpoint's processor limits the image size, its
``preprocessor_config.json``), with the weight size vLLM logged (or the byte model's estimate
when the log has none), and compared with the available KV memory vLLM printed. It also prints
what "text only" (``--limit-mm-per-prompt 0``) would give back. Run::

    python benchmarks/multimodal_accuracy.py [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvpilot.core.base.plan import PlanInputs
from kvpilot.core.base.units import GiB
from kvpilot.core.fit.budget import ENCODER_PROFILE_TERM, compute_capacity
from kvpilot.core.models.local import load_local_model

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
CONFIGS = HERE.parent / "tests" / "data" / "models"

#: case id -> (config folder, config.json additions, preprocessor_config.json or None, note)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any] | None, str]] = {
    "gpu24-uitars7b-qwen2vl-8k-v066": (
        "qwen2-vl-7b-instruct",
        {},
        # UI-TARS 1.0 limits screenshots to 2,700 x 28 x 28 pixels (its SDK's MAX_PIXELS_V1_0)
        {"min_pixels": 3136, "max_pixels": 2116800, "patch_size": 14, "merge_size": 2},
        "UI-TARS 7B (Qwen2-VL); processor max_pixels 2,116,800 assumed (UI-TARS 1.0 limit)",
    ),
    "rtxpro6000-qwen3vl-30b-a3b-fp8-32k-u0.70-v0202": (
        "qwen3-vl-30b-a3b-instruct",
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}},
        None,
        "weights not logged: byte-model estimate (FP8 text, 16-bit vision tower)",
    ),
}


def _case_index() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for path in sorted(DATA.glob("calibration_cases*.json")):
        for case in json.loads(path.read_text()):
            cases[case["case_id"]] = case
    return cases


def _model_dir(root: Path, case: dict[str, Any], folder: str, extra: dict[str, Any],
               pre: dict[str, Any] | None) -> Path:
    src = CONFIGS / folder
    dest = root / folder
    shutil.copytree(src, dest)
    cfg = json.loads((dest / "config.json").read_text())
    cfg.update(extra)
    (dest / "config.json").write_text(json.dumps(cfg))
    if pre is not None:
        (dest / "preprocessor_config.json").write_text(json.dumps(pre))
    weights = case["reported"].get("weights_gib")
    if weights is not None:
        tp = case["tensor_parallel_size"] or 1
        (dest / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": round(weights * GiB * tp)}, "weight_map": {}}
        ))
    return dest


def evaluate() -> list[dict[str, Any]]:
    """One row per vision-language case: reported and predicted KV, the encoder term."""
    index = _case_index()
    rows: list[dict[str, Any]] = []
    for case_id, (folder, extra, pre, note) in CASES.items():
        case = index[case_id]
        with tempfile.TemporaryDirectory() as tmp:
            model = load_local_model(
                _model_dir(Path(tmp), case, folder, extra, pre), model_id=case["model_id"]
            )
        inputs = PlanInputs(
            model=model,
            gpu_total_bytes=int(case["gpu_total_gib_reported"] * GiB),
            gpu_name=case["gpu_name"],
            gpu_memory_utilization=case["gpu_memory_utilization"],
            max_model_len=case["max_model_len"],
            max_num_seqs=case["max_num_seqs"],
            max_num_batched_tokens=case["max_num_batched_tokens"],
            tensor_parallel_size=case["tensor_parallel_size"] or 1,
            enforce_eager=bool(case["enforce_eager"]),
            vllm_version=case["vllm_version"],
        )
        cap = compute_capacity(inputs)
        text_only = compute_capacity(replace(inputs, limit_mm_per_prompt=0))
        encoder = next(t for t in cap.terms if t.name == ENCODER_PROFILE_TERM)
        reported = case["reported"]["available_kv_gib"]
        predicted = cap.available_kv_bytes / GiB
        rows.append({
            "case": case_id,
            "version": case["vllm_version"],
            "reported_kv_gib": reported,
            "predicted_kv_gib": round(predicted, 3),
            "kv_error_pct": round((predicted - reported) / reported * 100, 2),
            "weights_gib": round(cap.weights_bytes / GiB, 3),
            "weights_source": cap.inputs["weights_source"],
            "reported_activation_gib": case["reported"].get("activation_peak_gib"),
            "predicted_activation_gib": round(
                (cap.activation_peak_bytes + encoder.bytes) / GiB, 3
            ),
            "encoder_profile_gib": round(encoder.bytes / GiB, 3),
            "encoder_note": encoder.note,
            "text_only_kv_gain_gib": round(
                (text_only.available_kv_bytes - cap.available_kv_bytes) / GiB, 3
            ),
            "note": note,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows = evaluate()
    errors = [abs(r["kv_error_pct"]) for r in rows]
    summary = {
        "cases": len(rows),
        "kv_median_abs_error_pct": round(statistics.median(errors), 2),
        "kv_worst_abs_error_pct": round(max(errors), 2),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=2))
        return 0
    print(f"{'case':48} {'ver':7} {'KV rep':>7} {'pred':>7} {'err%':>6} {'act rep':>7} "
          f"{'pred':>6} {'encoder':>7} {'text-only +KV':>13}")
    for r in rows:
        print(f"{r['case']:48} {r['version']:7} {r['reported_kv_gib']:>7.2f} "
              f"{r['predicted_kv_gib']:>7.2f} {r['kv_error_pct']:>6.2f} "
              f"{r['reported_activation_gib']!s:>7} {r['predicted_activation_gib']:>6.2f} "
              f"{r['encoder_profile_gib']:>7.3f} {r['text_only_kv_gain_gib']:>13.3f}")
        print(f"    {r['note']}; weights {r['weights_gib']} GiB ({r['weights_source']})")
        print(f"    {r['encoder_note']}")
    print("summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
