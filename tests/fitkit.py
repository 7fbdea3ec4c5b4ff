"""Fit-engine test helpers: model specs from the config.json fixtures, GPU plans."""

from __future__ import annotations

from pathlib import Path

from kvpilot.core.fit.plan import PlanInputs
from kvpilot.core.models.local import spec_from_config
from kvpilot.core.models.spec import ModelSpec

MODELS = Path(__file__).resolve().parent / "data" / "models"


def fixture_spec(name: str, weights_bytes: int | None = None) -> ModelSpec:
    """Spec of tests/data/models/<name>/config.json, with the given checkpoint size."""
    import json
    from dataclasses import replace

    config = json.loads((MODELS / name / "config.json").read_text())
    spec = spec_from_config(config, model_id=name, source=str(MODELS / name))
    return replace(spec, weights_bytes=weights_bytes, weights_source="file")


def rtx4090(model: ModelSpec, **kw: object) -> PlanInputs:
    """A plan on an RTX 4090 (24,564 MiB, SM 8.9)."""
    base: dict[str, object] = {
        "model": model,
        "gpu_total_bytes": 24564 << 20,
        "gpu_name": "NVIDIA GeForce RTX 4090",
        "compute_capability": (8, 9),
    }
    base.update(kw)
    return PlanInputs(**base)  # type: ignore[arg-type]
