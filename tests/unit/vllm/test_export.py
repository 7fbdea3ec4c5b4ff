"""The plan taken elsewhere: command, docker run, compose, Helm values, checked against the
published schemas (compose-spec, production-stack) and yamllint."""

from __future__ import annotations

import copy
import json
import shlex
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest
import yaml
from testpaths import DATA
from yamllint import linter
from yamllint.config import YamlLintConfig

from kvpilot.core.base.errors import CommandError
from kvpilot.core.base.units import GiB
from kvpilot.core.cli import main
from kvpilot.core.fit.budget import compute_capacity
from kvpilot.core.fit.measurements import Measured
from kvpilot.core.vllm import export
from kvpilot.core.vllm.command import LaunchSpec, build_argv_tail, build_command

SCHEMAS = DATA / "schemas"
MODELS = DATA / "models"
SECRET = "sk-very-secret-123"
HF_SECRET = "hf_secret_456"
REV = "0123456789abcdef0123456789abcdef01234567"
YAMLLINT = YamlLintConfig("extends: default\nrules:\n  line-length: {max: 120}\n"
                          "  indentation: {indent-sequences: whatever}\n")


def _compose_schema() -> dict:
    return json.loads((SCHEMAS / "compose-spec.json").read_text())


def _helm_schema(strict: bool = False) -> dict:
    schema = json.loads((SCHEMAS / "production-stack-values.schema.json").read_text())
    if strict:  # the published schema allows unknown keys; kvpilot must not invent any
        schema = copy.deepcopy(schema)
        spec = schema["properties"]["servingEngineSpec"]
        item = spec["properties"]["modelSpec"]["items"]
        for node in (spec, item, item["properties"]["vllmConfig"]):
            node["additionalProperties"] = False
    return schema


def _lint(text: str) -> list[str]:
    return [f"{p.line}: {p.desc}" for p in linter.run(text, YAMLLINT) if p.level == "error"]


@pytest.fixture
def plan() -> export.ExportPlan:
    from fitkit import fixture_spec, rtx4090

    model = replace(fixture_spec("qwen3-8b", 16_381_470_720),
                    model_id="Qwen/Qwen3-8B", source=f"hub-cache:Qwen/Qwen3-8B@{REV}")
    inputs = rtx4090(model, max_model_len=16384, kv_cache_dtype="fp8", max_num_seqs=8,
                     gpu_memory_utilization=0.92, enforce_eager=True)
    spec = LaunchSpec.from_plan(inputs, "Qwen/Qwen3-8B", api_key=SECRET, hf_token=HF_SECRET,
                                extra_args=("--enable-chunked-prefill",))
    measured = Measured(measured_at="2026-11-30T10:00:00Z", source="launch",
                        available_kv_bytes=int(5.5 * GiB), kv_cache_tokens=80_000,
                        max_concurrency=4.88, concurrency_for_len=16384)
    return export.build_export_plan(spec, inputs, capacity=compute_capacity(inputs),
                                    measured=measured)


def test_plan_carries_revision_release_and_gpu(plan):
    assert plan.revision == REV
    assert plan.image == "vllm/vllm-openai:v0.33.0"
    assert plan.gpus == 1
    lines = export.capacity_lines(plan)
    assert lines[1].startswith("predicted: KV cache ") and "16,384 tokens" in lines[1]
    assert lines[2].startswith("measured (launch, 2026-11-30T10:00:00Z): KV cache 5.50 GiB")
    assert "80,000 tokens" in lines[2]


def test_command_is_the_launch_argv_plus_revision_and_no_secret(plan):
    text = export.render(plan, "command")
    assert SECRET not in text and HF_SECRET not in text
    body = [line for line in text.splitlines() if not line.startswith("#")]
    argv = shlex.split(body[0])
    assigns = [a for a in argv if "=" in a and not a.startswith("-")]
    assert "VLLM_API_KEY=${VLLM_API_KEY:?set VLLM_API_KEY}" in assigns
    start = argv.index("vllm")
    local = build_command(plan.spec).argv
    assert tuple(argv[start:]) == (*local, "--revision", REV)
    assert "# predicted: KV cache" in text and "# measured (launch" in text


def _docker_argv(text: str) -> list[str]:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return shlex.split(body.replace("\\\n", " "))


def test_docker_run_reserves_gpus_mounts_cache_and_checks_health(plan):
    text = export.render(plan, "docker")
    assert SECRET not in text and HF_SECRET not in text
    argv = _docker_argv(text)
    assert argv[:2] == ["docker", "run"]
    assert argv[argv.index("--gpus") + 1] == "1"
    assert argv[argv.index("-p") + 1] == "127.0.0.1:8000:8000"
    assert "${HOME}/.cache/huggingface:/root/.cache/huggingface" in argv
    env = [argv[i + 1] for i, a in enumerate(argv) if a == "-e"]
    assert "VLLM_API_KEY" in env and "HF_TOKEN" in env and "VLLM_NO_USAGE_STATS=1" in env
    health = shlex.split(argv[argv.index("--health-cmd") + 1])
    assert health[:2] == ["python3", "-c"] and "http://127.0.0.1:8000/health" in health[2]
    image = argv.index("vllm/vllm-openai:v0.33.0")
    served = build_argv_tail(replace(plan.spec, host="0.0.0.0"))
    assert argv[image + 1:] == [*served, "--revision", REV]


def test_docker_pins_gpu_uuids_when_given(plan):
    pinned = replace(plan, gpu_ids=("GPU-aaaa", "GPU-bbbb"))
    argv = _docker_argv(export.render(pinned, "docker"))
    # docker parses --gpus as CSV: a list of devices keeps its inner double quotes
    assert argv[argv.index("--gpus") + 1] == '"device=GPU-aaaa,GPU-bbbb"'


def test_compose_validates_against_the_compose_spec(plan):
    text = export.render(plan, "compose")
    assert SECRET not in text and HF_SECRET not in text
    assert _lint(text) == []
    doc = yaml.safe_load(text)
    jsonschema.Draft7Validator(_compose_schema()).validate(doc)
    (service,) = doc["services"].values()
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert device == {"driver": "nvidia", "capabilities": ["gpu"], "count": 1}
    assert service["environment"]["VLLM_API_KEY"] == "${VLLM_API_KEY:?set VLLM_API_KEY}"
    assert service["environment"]["HF_TOKEN"] == "${HF_TOKEN:-}"
    assert service["healthcheck"]["test"][0] == "CMD"
    assert service["command"][-2:] == ["--revision", REV]
    assert "--max-model-len" in service["command"]
    two = export.compose_document(replace(plan, gpu_ids=("GPU-aaaa", "GPU-bbbb")))
    jsonschema.Draft7Validator(_compose_schema()).validate(two)


def test_compose_schema_rejects_a_broken_service(plan):
    doc = export.compose_document(plan)
    (service,) = doc["services"].values()
    service["deploy"]["resources"]["reservations"]["devices"][0]["count"] = [1]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_compose_schema()).validate(doc)


def _chart_argv(entry: dict) -> list[str]:
    """The flags the production-stack template passes for one modelSpec entry."""
    cfg = entry["vllmConfig"]
    argv = [entry["modelURL"], "--host", "0.0.0.0", "--port", "8000"]
    argv.append("--enable-prefix-caching" if cfg.get("enablePrefixCaching")
                else "--no-enable-prefix-caching")
    for key, flag in (("maxModelLen", "--max-model-len"), ("dtype", "--dtype"),
                      ("tensorParallelSize", "--tensor-parallel-size"),
                      ("maxNumSeqs", "--max-num-seqs"),
                      ("gpuMemoryUtilization", "--gpu-memory-utilization")):
        if key in cfg:
            argv += [flag, str(cfg[key])]
    argv += cfg.get("extraArgs", [])
    if entry.get("modelRevision"):
        argv += ["--revision", entry["modelRevision"]]
    return argv


def _pairs(argv: list[str]) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    i = 1
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.add((argv[i], argv[i + 1]))
            i += 2
        else:
            out.add((argv[i],))
            i += 1
    return out


def test_helm_values_validate_and_pass_the_same_flags(plan):
    text = export.render(plan, "helm")
    assert SECRET not in text and HF_SECRET not in text
    assert _lint(text) == []
    values = yaml.safe_load(text)
    jsonschema.Draft202012Validator(_helm_schema()).validate(values)
    jsonschema.Draft202012Validator(_helm_schema(strict=True)).validate(values)
    (entry,) = values["servingEngineSpec"]["modelSpec"]
    assert entry["modelURL"] == "Qwen/Qwen3-8B" and entry["modelRevision"] == REV
    assert entry["requestGPU"] == 1 and entry["tag"] == "v0.33.0"
    assert entry["resources"] == {
        "requests": {"cpu": "8", "memory": "20Gi", "nvidia.com/gpu": 1},  # 15.3 GiB x 1.25
        "limits": {"nvidia.com/gpu": 1},
    }
    assert entry["vllmConfig"]["maxModelLen"] == 16384
    assert entry["vllmConfig"]["gpuMemoryUtilization"] == pytest.approx(0.92)
    assert entry["hf_token"] == {"secretName": "hf-token", "secretKey": "token"}
    assert values["servingEngineSpec"]["vllmApiKey"]["secretName"] == "vllm-api-key"
    # what the chart would run == what kvpilot runs locally (prefix caching stated explicitly)
    local = [*build_argv_tail(replace(plan.spec, host="0.0.0.0")), "--revision", REV]
    assert _pairs(_chart_argv(entry)) - {("--enable-prefix-caching",)} == _pairs(local)


def test_helm_refuses_a_local_folder_without_repo(plan):
    local = replace(plan, spec=replace(plan.spec, model="/srv/models/mine"), repo_id=None)
    with pytest.raises(CommandError, match="local folder"):
        export.render(local, "helm")


def test_unknown_format_is_one_sentence(plan):
    with pytest.raises(CommandError, match="unknown export format 'k8s'"):
        export.render(plan, "k8s")


# ------------------------------------------------------------------ the CLI


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An HF cache with Qwen/Qwen3-8B at revision REV (config.json + index)."""
    cache = tmp_path / "hf"
    repo = cache / "models--Qwen--Qwen3-8B"
    snap = repo / "snapshots" / REV
    snap.mkdir(parents=True)
    (snap / "config.json").write_text((MODELS / "qwen3-8b" / "config.json").read_text())
    (snap / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 16_381_470_720}, "weight_map": {}}))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REV)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("KVPILOT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("KVPILOT_API_KEY", SECRET)
    return cache


@pytest.mark.parametrize("fmt", export.FORMATS)
def test_cli_prints_each_format(hub_cache, capsys, fmt):
    rc = main(["export", "--model", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--max-model-len",
               "8192", "--format", fmt])
    out = capsys.readouterr().out
    assert rc == 0
    assert SECRET not in out
    assert REV in out and "8192" in out
    assert "# predicted: KV cache" in out
    if fmt == "compose":
        jsonschema.Draft7Validator(_compose_schema()).validate(yaml.safe_load(out))
    if fmt == "helm":
        jsonschema.Draft202012Validator(_helm_schema(strict=True)).validate(yaml.safe_load(out))


def test_cli_without_gpu_exports_without_capacity(hub_cache, capsys, monkeypatch):
    monkeypatch.setattr("kvpilot.core.commands.serving_args.detected_gpu", lambda *_: None)
    monkeypatch.setattr("kvpilot.core.commands.plan.detected_vllm_version", lambda *_: None)
    rc = main(["export", "--model", "Qwen/Qwen3-8B", "--format", "compose"])
    out = capsys.readouterr().out
    assert rc == 0 and "predicted" not in out
    jsonschema.Draft7Validator(_compose_schema()).validate(yaml.safe_load(out))


def test_cli_export_pins_this_machines_gpus(hub_cache, capsys, monkeypatch):
    monkeypatch.setenv("KVPILOT_FAKE_NVML", "rtx4090-rtx3090")
    rc = main(["export", "--model", "Qwen/Qwen3-8B", "--gpus", "0,1", "--max-model-len", "8192",
               "--format", "compose"])
    doc = yaml.safe_load(capsys.readouterr().out)
    assert rc == 0
    jsonschema.Draft7Validator(_compose_schema()).validate(doc)
    (service,) = doc["services"].values()
    device = service["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["device_ids"] == ["GPU-6f3a2c1e-8b4d-4e2a-9c71-0d5e3b7a9f12",
                                    "GPU-1b2c3d4e-5f60-4718-8a9b-0c1d2e3f4a5b"]
    i = service["command"].index("--tensor-parallel-size")
    assert service["command"][i + 1] == "2"
    rc = main(["export", "--model", "Qwen/Qwen3-8B", "--gpus", "0,1", "--format", "helm"])
    values = yaml.safe_load(capsys.readouterr().out)
    (entry,) = values["servingEngineSpec"]["modelSpec"]
    assert entry["requestGPU"] == 2 and entry["vllmConfig"]["tensorParallelSize"] == 2
    assert entry["resources"]["limits"] == {"nvidia.com/gpu": 2}
    jsonschema.Draft202012Validator(_helm_schema(strict=True)).validate(values)


def test_pipeline_parallel_reaches_every_format(plan):
    pp = replace(plan, pipeline_parallel_size=2)
    assert pp.gpus == 2
    assert "--pipeline-parallel-size 2" in export.render(pp, "command")
    compose = export.compose_document(pp)
    (service,) = compose["services"].values()
    # spelled once, by command.build_argv_tail, after the tensor-parallel size
    command = service["command"]
    assert command.count("--pipeline-parallel-size") == 1
    at = command.index("--pipeline-parallel-size")
    assert command[at + 1] == "2"
    helm = export.helm_values(pp)["servingEngineSpec"]["modelSpec"][0]
    assert helm["requestGPU"] == 2
    extra = helm["vllmConfig"]["extraArgs"]
    assert extra.count("--pipeline-parallel-size") == 1
    assert extra[extra.index("--pipeline-parallel-size") + 1] == "2"
    # the launch settings' stages count as the plan's
    from_spec = replace(plan, spec=replace(plan.spec, pipeline_parallel_size=2))
    assert from_spec.gpus == 2
    assert export.render(from_spec, "command").count("--pipeline-parallel-size 2") == 1
